package httpfx_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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

// noted is a writer that records the errors Render tells it about.
type noted struct {
	http.ResponseWriter
	errs []error
}

func (n *noted) NoteError(err error) { n.errs = append(n.errs, err) }

// unwrapping is a middleware's writer wrap that hides the methods of the
// writer below it but for Unwrap.
type unwrapping struct{ http.ResponseWriter }

func (u unwrapping) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// Render tells the first ErrorNoter down the Unwrap chain which error the
// answer renders (idempotencyfx's recorder relies on it), but not a client
// that left, whose 499 renders nothing.
func TestRender_TellsTheErrorNoterBelowWrappers(t *testing.T) {
	errs := httpfx.NewErrors(nil)
	n := &noted{ResponseWriter: httptest.NewRecorder()}
	boom := errors.New("boom")
	errs.Render(unwrapping{n}, httptest.NewRequest(http.MethodGet, "/", nil), boom)
	if len(n.errs) != 1 || !errors.Is(n.errs[0], boom) {
		t.Fatalf("noted %v, want [boom]", n.errs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := &noted{ResponseWriter: httptest.NewRecorder()}
	errs.Render(unwrapping{gone}, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx), context.Canceled)
	if len(gone.errs) != 0 {
		t.Fatalf("a client that left: noted %v, want nothing", gone.errs)
	}
}

// Write writes what json.Marshal makes of the problem, byte for byte, with
// text that encoding/json escapes (HTML characters, U+2028, invalid UTF-8)
// in every string member and in an extension.
func TestProblemWrite_IsJSONMarshalsOutput(t *testing.T) {
	odd := "<a href=\"x\">&</a> \u2028 \xff tab\t"
	p := httpfx.Problem{Type: "https://example.com/" + odd, Title: odd, Status: 409, Detail: odd, Instance: odd, Code: odd,
		Extensions: map[string]any{"note": odd, "n": 1.5}}
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	p.Write(w)
	if got := w.Body.String(); got != string(want)+"\n" {
		t.Fatalf("body\n%q\nwant\n%q", got, string(want)+"\n")
	}
}

func BenchmarkProblem_Write(b *testing.B) {
	p := httpfx.NewProblem(http.StatusInternalServerError, "idempotency_store_unavailable", "the idempotency store is unavailable; retry later")
	p.RetryAfter = time.Second
	b.ReportAllocs()
	for b.Loop() {
		p.Write(httptest.NewRecorder())
	}
}
