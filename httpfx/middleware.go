package httpfx

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"time"
	"unsafe"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// RequestIDHeader carries the request id, taken from the request when a
// well-formed one is sent, else generated; it is echoed on the response.
const RequestIDHeader = "X-Request-Id"

// requestState is what the router keeps about one request, in one
// allocation: it is the request's context node (answering the ContextValues
// too) and holds the writer's wrap.
type requestState struct {
	context.Context // the request's context as the front middleware got it
	id              string
	errors          *Errors
	values          []ContextValue // the router's, shared by its requests, never modified
	unmatched       bool
	routing         *chi.Context   // the root router's, filled as the request is routed
	aborted         bool           // the connection was aborted: no complete answer went out
	writer          responseWriter // the wrap of the request's writer (writer.go)
	idHeader        [1]string      // the response's X-Request-Id, without an allocation
	idDigits        [2 * requestIDBytes]byte
}

// Value implements context.Context.
func (s *requestState) Value(key any) any {
	if key == (requestStateKey{}) {
		return s
	}
	for i := range s.values {
		if s.values[i].Key == key { // keys are checked comparable when the router is built
			return s.values[i].Value
		}
	}
	return s.Context.Value(key)
}

// String names the node as context.WithValue's do, for %v of a context:
// the parent's String, or its type (never its contents), then this node.
func (s *requestState) String() string {
	parent := fmt.Sprintf("%T", s.Context)
	if st, ok := s.Context.(fmt.Stringer); ok {
		parent = st.String()
	}
	return parent + ".WithValue(httpfx request state)"
}

// markUnmatched records that the router's own 404 or 405 answered r (in a
// sub-router chi's pattern would be its mount point).
func markUnmatched(r *http.Request) {
	if st := stateFrom(r.Context()); st != nil {
		st.unmatched = true
	}
}

// stateFrom is the state of the request served in ctx, nil outside one
// served by httpfx's router.
func stateFrom(ctx context.Context) *requestState {
	st, _ := ctx.Value(requestStateKey{}).(*requestState)
	return st
}

type requestStateKey struct{}

// requestIDBytes is the size of a generated request id: 24 hex digits.
const requestIDBytes = 12

// newRequestID returns 24 hex digits in the state's own array (written only
// here, once). Unique, not secret: math/rand/v2 avoids a system call.
func (s *requestState) newRequestID() string {
	var b [requestIDBytes]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	hex.Encode(s.idDigits[:], b[:])
	return unsafe.String(&s.idDigits[0], len(s.idDigits))
}

// RequestIDFromContext returns the id of the request being served in ctx:
// the client's X-Request-Id when it sent a well-formed one (1-128 visible
// ASCII characters), else one the router generated. It is "" outside a
// request served by httpfx's router.
func RequestIDFromContext(ctx context.Context) string {
	if st := stateFrom(ctx); st != nil {
		return st.id
	}
	return ""
}

// recoverer turns a panic into a 500 problem, records it on the span and
// logs it with its stack. http.ErrAbortHandler is re-raised, as net/http
// expects. A handler that leaves by runtime.Goexit gets the same 500, sent
// at once, since net/http closes the connection without finishing it.
func recoverer(log *zap.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			returned := false
			defer func() {
				if !returned {
					recovered(w, r, log, recover())
				}
			}()
			next.ServeHTTP(w, r)
			returned = true
		})
	}
}

// recovered answers a handler that left by panicking with p, or by
// runtime.Goexit when p is nil.
func recovered(w http.ResponseWriter, r *http.Request, log *zap.Logger, p any) {
	err, ok := p.(error)
	switch {
	case ok && errors.Is(err, http.ErrAbortHandler):
		panic(p)
	case p == nil:
		err = errors.New("handler exited by runtime.Goexit")
	case !ok:
		err = fmt.Errorf("panic: %v", p)
	}
	span := trace.SpanFromContext(r.Context())
	span.RecordError(err, trace.WithStackTrace(true))
	span.SetStatus(codes.Error, "panic")
	log.Error("handler panicked", zap.Error(err), zap.String("path", r.URL.Path), zap.ByteString("stack", debug.Stack()))
	if st := stateFrom(r.Context()); !nothingSent(st) { // st: recoverer runs inside the front
		// The answer began, or a middleware answered while the panic
		// unwound: a problem appended now would corrupt it.
		if p != nil && st.writer.code >= http.StatusBadRequest {
			return // an error answer went out (a timeout's 504): it stands
		}
		// Abort the connection, so that the client cannot take a truncated
		// answer for a complete one; the front middleware records it as an
		// aborted 500.
		st.aborted = true
		if p == nil {
			return // net/http closes the connection
		}
		panic(http.ErrAbortHandler)
	}
	// Also when net/http refused the handler's status (invalid WriteHeader
	// code) before sending anything: the front middleware's wrap takes a
	// status as written only once the server's writer has taken it.
	h := w.Header()
	for _, k := range contentHeaders {
		delete(h, k)
	}
	if p == nil { // net/http closes the connection after Goexit: say so
		h.Set("Connection", "close")
	}
	NewProblem(http.StatusInternalServerError, "internal_error", "The server could not complete the request.").Write(w)
	if p == nil {
		closeAfterGoexit(w)
	}
}

// contentHeaders describe the answer a handler was making, not the problem
// that replaces it (Content-Type and Content-Length are the problem's own).
var contentHeaders = []string{"Content-Encoding", "Content-Disposition", "Content-Language",
	"Content-Location", "Content-Range", "Etag", "Last-Modified", "Trailer", "Transfer-Encoding"}

// closeAfterGoexit sends the answer, then ends an HTTP/1 connection as
// net/http ends one it does not reuse: FIN, then what the client still sends
// (a body the handler did not read) discarded for up to 500 ms before the
// close, which would otherwise reset the connection and lose the answer.
// HTTP/2 cannot be hijacked: there the stream is reset after the answer.
func closeAfterGoexit(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	conn, _, err := rc.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.Copy(io.Discard, conn)
}

// nothingSent reports whether the front middleware's wrap shows that no
// valid status and no byte went out.
func nothingSent(st *requestState) bool {
	return (st.writer.code < 100 || st.writer.code > 999) && st.writer.bytes == 0
}
