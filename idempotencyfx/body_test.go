package idempotencyfx

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redisfx/redisfx/httpfx"
)

// readBody reads what the fingerprint needs and gives the handler the same
// bytes back, whatever the body's framing: a known length, an unknown one
// (chunked), a body longer than it announced, a body over the limit, and a
// body that fails to read.
func TestReadBody_EveryFraming(t *testing.T) {
	t.Parallel()
	const limit = 64
	cases := map[string]struct {
		body          io.Reader
		contentLength int64
		want          string
		wantErr       string // CodeBodyTooLarge, "body_unreadable", or "" for none
	}{
		"known length":                         {strings.NewReader(`{"a":1}`), 7, `{"a":1}`, ""},
		"empty, known length":                  {strings.NewReader(""), 0, "", ""},
		"unknown length":                       {strings.NewReader(strings.Repeat("x", 60)), -1, strings.Repeat("x", 60), ""},
		"unknown length, at limit":             {strings.NewReader(strings.Repeat("x", limit)), -1, strings.Repeat("x", limit), ""},
		"unknown length, over":                 {strings.NewReader(strings.Repeat("x", limit+1)), -1, "", CodeBodyTooLarge},
		"announced over limit":                 {strings.NewReader("x"), limit + 1, "", CodeBodyTooLarge},
		"longer than announced":                {strings.NewReader("0123456789"), 4, "0123456789", ""},
		"longer than announced and over limit": {strings.NewReader(strings.Repeat("y", limit+10)), 4, "", CodeBodyTooLarge},
		"read error":                           {io.MultiReader(strings.NewReader("abc"), errReader{}), -1, "", "body_unreadable"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.Body, r.ContentLength = io.NopCloser(c.body), c.contentLength
			got, err := readBody(r, limit)
			if c.wantErr != "" {
				if code := bodyErrorCode(err); code != c.wantErr {
					t.Fatalf("read %q, error %v (code %q), want the error %s", got, err, code, c.wantErr)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("read %q, %v; want %q", got, err, c.want)
			}
			again, err := io.ReadAll(r.Body)
			if err != nil || !bytes.Equal(again, got) || r.Body.Close() != nil {
				t.Fatalf("the handler reads %q (%v), want the same bytes", again, err)
			}
		})
	}
}

// bodyErrorCode is the code of readBody's error: the idempotency error's or
// the problem's.
func bodyErrorCode(err error) string {
	var tooLarge *IdempotencyBodyTooLargeError
	var problem *httpfx.ProblemError
	switch {
	case errors.As(err, &tooLarge):
		return tooLarge.Code
	case errors.As(err, &problem):
		return problem.Problem.Code
	}
	return ""
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// stallingBody sends one byte of a body that announced much more, then
// fails as a connection held and dropped would; it notes the largest
// buffer it was asked to fill.
type stallingBody struct {
	sent    bool
	largest int
}

func (b *stallingBody) Read(p []byte) (int, error) {
	b.largest = max(b.largest, len(p))
	if !b.sent {
		b.sent = true
		p[0] = '{'
		return 1, nil
	}
	return 0, errors.New("connection reset")
}

// A keyed request whose Content-Length says 1 MiB (MaxBodyBytes' default)
// and whose body brings one byte must not get a 1 MiB buffer: the memory
// held for a request grows with the bytes that arrive, not with what the
// client announces.
func TestReadBody_LyingContentLength_BufferGrowsWithArrivingBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	body := &stallingBody{}
	r := httptest.NewRequest(http.MethodPost, "/payments", nil)
	r.Body, r.ContentLength = io.NopCloser(body), DefaultMaxBodyBytes
	r.Header.Set("Idempotency-Key", "lying-length")
	w := httptest.NewRecorder()
	e.http.Config.Handler.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400 body_unreadable", w.Code)
	}
	if body.largest > 4<<10 {
		t.Fatalf("a body that sent 1 byte was read into a %d-byte buffer", body.largest)
	}
}
