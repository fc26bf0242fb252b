package httpfx_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/redisfx/redisfx/httpfx"
)

// Handlers may return errors; a ProblemError becomes its problem response.
func ExampleHandlerFunc() {
	h := httpfx.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return &httpfx.ProblemError{Problem: httpfx.NewProblem(http.StatusBadRequest, "invalid_amount", "amount must be positive")}
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/payments", nil))
	fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Header().Get("Cache-Control"))
	fmt.Print(w.Body.String())
	// Output:
	// 400 application/problem+json no-store
	// {"type":"about:blank","title":"Bad Request","status":400,"detail":"amount must be positive","code":"invalid_amount"}
}
