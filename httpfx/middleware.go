package httpfx

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime/debug"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// RequestIDHeader carries the request id, taken from the request when a
// well-formed one is sent, else generated; it is echoed on the response.
const RequestIDHeader = "X-Request-Id"

// requestID sets X-Request-Id on the response.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			// Unique, not secret: math/rand/v2's per-thread ChaCha8 avoids a
			// getrandom system call per request.
			var b [12]byte
			binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
			binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r)
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// recoverer turns a panic into a 500 problem, records it on the span and
// logs it with its stack. http.ErrAbortHandler is re-raised, as net/http
// expects.
func recoverer(log *zap.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				p := recover()
				if p == nil {
					return
				}
				if p == http.ErrAbortHandler {
					panic(p)
				}
				err, ok := p.(error)
				if !ok {
					err = fmt.Errorf("panic: %v", p)
				}
				span := trace.SpanFromContext(r.Context())
				span.RecordError(err, trace.WithStackTrace(true))
				span.SetStatus(codes.Error, "panic")
				log.Error("handler panicked", zap.Error(err), zap.String("path", r.URL.Path),
					zap.ByteString("stack", debug.Stack()))
				NewProblem(http.StatusInternalServerError, "internal_error", "The server could not complete the request.").Write(w)
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// installErrors puts the application's error chain in the request context
// for HandlerFunc.
func installErrors(e *Errors) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(WithErrors(r.Context(), e)))
		})
	}
}
