package httpfx

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// responseWriter is the front middleware's wrap of a request's writer: it
// measures the final status and the bytes written. It lives in the request's
// state (no allocation of its own); the handler gets it, or one of the
// one-pointer types below, with exactly the optional interfaces (Flusher,
// Hijacker, ReaderFrom, Pusher) the wrapped writer has.
type responseWriter struct {
	w           http.ResponseWriter
	code        int // the final status written, 0 before
	bytes       int
	wroteHeader bool
}

// Header implements http.ResponseWriter.
func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

// WriteHeader implements http.ResponseWriter. A 1xx status (but 101) is not
// the final one. A status counts as written only once the server's writer
// took it: net/http panics on an invalid code, and the recovery's 500 must
// still go out.
func (rw *responseWriter) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		rw.w.WriteHeader(code)
		return
	}
	if !rw.wroteHeader {
		rw.w.WriteHeader(code)
		rw.code, rw.wroteHeader = code, true
	}
}

// Write implements http.ResponseWriter.
func (rw *responseWriter) Write(b []byte) (int, error) {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	n, err := rw.w.Write(b)
	rw.bytes += n
	return n, err
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }

// The writer a handler gets, by what the wrapped writer can do. Each is one
// pointer, so that converting it to http.ResponseWriter allocates nothing;
// the combinations embed the simpler ones for their methods.
type (
	flushWriter       struct{ *responseWriter }
	hijackWriter      struct{ *responseWriter }
	flushHijackWriter struct{ flushWriter }
	fancyWriter       struct{ flushHijackWriter } // Flusher, Hijacker, ReaderFrom
	http2Writer       struct{ flushWriter }       // Flusher, Pusher
)

// FlushError flushes through the wrapped writer's FlushError when it has
// one, so that a write error reaches the handler, else its Flush.
func (w flushWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	switch f := w.w.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
		return nil
	}
	return http.ErrNotSupported
}

// Flush implements http.Flusher.
func (w flushWriter) Flush() { _ = w.FlushError() }

// Hijack implements http.Hijacker.
func (w hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.w.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, http.ErrNotSupported
}

// Hijack implements http.Hijacker.
func (w flushHijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return hijackWriter(w.flushWriter).Hijack()
}

// ReadFrom implements io.ReaderFrom, keeping net/http's sendfile path for
// io.Copy into the answer.
func (w fancyWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	rf, ok := w.w.(io.ReaderFrom)
	if !ok {
		return 0, http.ErrNotSupported
	}
	n, err := rf.ReadFrom(r)
	w.bytes += int(n)
	return n, err
}

// Push implements http.Pusher.
func (w http2Writer) Push(target string, opts *http.PushOptions) error {
	if p, ok := w.w.(http.Pusher); ok {
		return p.Push(target, opts)
	}
	return http.ErrNotSupported
}

// wrap starts measuring w and returns the writer the handler gets.
func (rw *responseWriter) wrap(w http.ResponseWriter, protoMajor int) http.ResponseWriter {
	rw.w = w
	f := flushWriter{rw}
	_, fl := w.(http.Flusher)
	if protoMajor == 2 {
		if _, ps := w.(http.Pusher); fl && ps {
			return http2Writer{f}
		}
	} else {
		_, hj := w.(http.Hijacker)
		_, rf := w.(io.ReaderFrom)
		switch {
		case fl && hj && rf:
			return fancyWriter{flushHijackWriter{f}}
		case fl && hj:
			return flushHijackWriter{f}
		case hj:
			return hijackWriter{rw}
		}
	}
	if fl {
		return f
	}
	return rw
}
