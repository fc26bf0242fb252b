package idempotencyfx

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/redisfx/redisfx/httpfx"
)

// recorder buffers the handler's response so that the record is written to
// Redis before the client sees anything: an immediate retry is then always a
// replay. A response the recorder cannot keep (the handler flushes, hijacks
// the connection, or writes more than the limit) is passed through to the
// client as it comes and marked not replayable.
type recorder struct {
	w       http.ResponseWriter
	limit   int
	header  http.Header // the handler's view of the headers
	status  int
	body    []byte
	passing bool // streaming straight to w; nothing more is buffered
	failed  bool // an error status came after the answer began
	// retryLater: the answer renders an idempotency error of other work
	// (Service.Do inside the handler) that asks the client to retry later;
	// see NoteError.
	retryLater bool
	reason     string
}

// NoteError implements httpfx.ErrorNoter. A handler whose own idempotent
// work (Service.Do, a nested route) met an earlier failed attempt or one
// still in progress answers 409 with Retry-After: kept as this request's
// completed outcome, that 409 would be replayed to every retry it invites,
// until DefaultTTL. It is a failure of this request's work instead: retries
// get 409 idempotency_previous_failed until LockTimeout, and then run the
// handler again.
func (rec *recorder) NoteError(err error) {
	var failed *IdempotencyFailedError
	var timeout *IdempotencyTimeoutError
	if errors.As(err, &failed) || errors.As(err, &timeout) {
		rec.retryLater = true
	}
}

func newRecorder(w http.ResponseWriter, limit int) *recorder {
	return &recorder{w: w, limit: limit, header: w.Header()}
}

// Header implements http.ResponseWriter.
func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader implements http.ResponseWriter. As net/http's writer, it
// keeps the first status and panics on an invalid one (the handler's bug is
// then a failed outcome and a 500, not a recorded answer). An error status
// that comes after the answer began (httpfx renders a handler's returned
// error this way, a 499 when the client left) still says the work failed:
// the status sent stays the first, but the outcome is recorded as failed.
func (rec *recorder) WriteHeader(code int) {
	if rec.status != 0 || rec.passing {
		rec.failed = rec.failed || failureStatus(code)
		if rec.status == 0 { // hijacked: net/http says what it thinks of it
			rec.w.WriteHeader(code)
		}
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // net/http's words, which httpfx's recovery knows
	}
	if code < 200 { // informational: send now, do not record
		if code != http.StatusSwitchingProtocols {
			rec.w.WriteHeader(code)
			return
		}
	}
	rec.status = code
}

// Write implements http.ResponseWriter.
func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.passing {
		return rec.w.Write(p)
	}
	if len(rec.body)+len(p) > rec.limit {
		rec.passThrough("response larger than MaxResponseBytes")
		return rec.w.Write(p)
	}
	rec.body = append(rec.body, p...)
	return len(p), nil
}

// passThrough sends what is buffered and streams the rest.
func (rec *recorder) passThrough(reason string) {
	if rec.passing {
		return
	}
	rec.passing, rec.reason = true, reason
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	rec.w.WriteHeader(rec.status)
	if len(rec.body) > 0 {
		_, _ = rec.w.Write(rec.body)
	}
	rec.body = nil
}

// Flush means the handler streams: the response cannot be held back.
func (rec *recorder) Flush() {
	rec.passThrough("response was streamed (Flush)")
	_ = http.NewResponseController(rec.w).Flush()
}

// Hijack hands the connection to the handler; nothing can be recorded. A
// hijack that fails (HTTP/2, a writer that cannot) changes nothing: the
// handler then answers as usual, and that answer is recorded.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(rec.w).Hijack()
	if err == nil {
		rec.passing, rec.reason = true, "connection was hijacked"
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the underlying writer for
// deadlines; Flush and Hijack are intercepted above.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

// failureStatus reports whether a status says the work failed: a 5xx, or
// the 499 httpfx renders when the handler's error was the client leaving.
// Such an outcome is recorded as failed, never replayed as an answer.
func failureStatus(code int) bool {
	return code >= 500 || code == httpfx.StatusClientClosedRequest
}

// finishedStatus is the status the handler produced (200 if it wrote nothing).
func (rec *recorder) finishedStatus() int {
	if rec.status == 0 {
		return http.StatusOK
	}
	return rec.status
}

// send delivers a buffered response to the client.
func (rec *recorder) send() {
	if rec.passing {
		return
	}
	sendWithTrailers(rec.w, rec.finishedStatus(), rec.body, "")
}

// sendWithTrailers writes status and body (body, or if empty bodyText) to
// w, whose header map holds the response's headers. The values of the
// trailers the response declares (Trailer: X-Sum) are held back until after
// the body, so that they are sent as trailers, as the handler meant, and not
// as headers: the handler set them after its body, but a recorded or
// replayed response has them all in hand before the first byte.
func sendWithTrailers(w http.ResponseWriter, status int, body []byte, bodyText string) {
	h := w.Header()
	var held http.Header
	for _, declared := range h["Trailer"] {
		for name := range strings.SplitSeq(declared, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if vs, ok := h[name]; ok {
				if held == nil {
					held = http.Header{}
				}
				held[name] = vs
				delete(h, name)
			}
		}
	}
	w.WriteHeader(status)
	switch {
	case len(body) > 0:
		_, _ = w.Write(body)
	case bodyText != "":
		_, _ = io.WriteString(w, bodyText)
	}
	for k, vs := range held {
		h[k] = vs
	}
}
