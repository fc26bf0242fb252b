package httpfx_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/redisfx/redisfx/httpfx"
)

func TestProblemExtensions(t *testing.T) {
	p := httpfx.NewProblem(402, "insufficient_funds", "the account has 30 EUR")
	p.Extensions = map[string]any{"balance": 30, "accounts": []string{"/a/1"}, "status": 200, "code": "ignored"}
	w := httptest.NewRecorder()
	p.Write(w)
	want := `{"type":"about:blank","title":"Payment Required","status":402,"detail":"the account has 30 EUR","code":"insufficient_funds","accounts":["/a/1"],"balance":30}` + "\n"
	if got := w.Body.String(); got != want {
		t.Fatalf("body\n%s\nwant\n%s", got, want)
	}
	var back httpfx.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Status != 402 || back.Code != "insufficient_funds" || back.Extensions["balance"] != 30.0 || len(back.Extensions) != 2 {
		t.Fatalf("decoded %+v", back)
	}
}

func TestProblemWithAnExtensionThatDoesNotMarshal(t *testing.T) {
	p := httpfx.NewProblem(400, "bad", "x")
	p.Extensions = map[string]any{"f": func() {}}
	w := httptest.NewRecorder()
	p.Write(w)
	if got := w.Body.String(); got != `{"type":"about:blank","title":"Bad Request","status":400,"detail":"x","code":"bad"}`+"\n" || w.Code != 400 {
		t.Fatalf("%d %s", w.Code, got)
	}
}
