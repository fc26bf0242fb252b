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

// recorder buffers the handler's response so that the record is written
// before the client sees anything. One it cannot keep (flushed, hijacked,
// over the limit) is passed through.
type recorder struct {
	w          http.ResponseWriter
	limit      int
	header     http.Header // the handler's view of the headers
	status     int
	body       []byte
	passing    bool // streaming straight to w; nothing more is buffered
	failed     bool // an error status came after the answer began
	retryLater bool // see NoteError
	reason     string
}

// NoteError implements httpfx.ErrorNoter. A 409 with Retry-After rendered
// from idempotent work inside the handler is recorded as this request's
// failure: kept as completed, it would be replayed to every retry it invites.
func (rec *recorder) NoteError(err error) {
	var failed *IdempotencyFailedError
	var timeout *IdempotencyTimeoutError
	if errors.As(err, &failed) || errors.As(err, &timeout) {
		rec.retryLater = true
	}
}

// Header implements http.ResponseWriter.
func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader implements http.ResponseWriter: it keeps the first status and
// panics on an invalid one, as net/http does. An error status after the
// answer began records a failure.
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
	if code < 200 && code != http.StatusSwitchingProtocols { // informational: send now, do not record
		rec.w.WriteHeader(code)
		return
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
	rec.passing, rec.reason, rec.status = true, reason, rec.finishedStatus()
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

// Hijack hands the connection to the handler; nothing is recorded.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(rec.w).Hijack()
	if err == nil {
		rec.passing, rec.reason = true, "connection was hijacked"
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

// failureStatus reports whether a status says the work failed (5xx, 499).
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

func (rec *recorder) send() {
	if rec.passing {
		return
	}
	sendWithTrailers(rec.w, rec.finishedStatus(), rec.body, "")
}

// sendWithTrailers writes status and body (or bodyText) to w, holding the
// values of declared trailers back until after the body.
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
