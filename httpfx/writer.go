package httpfx

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// responseWriter is the front middleware's wrap of a request's writer: it
// measures the final status and the bytes written. It lives in the request's
// state (no allocation of its own), and the handler gets it through one of
// the one-pointer types below, each with exactly the optional interfaces
// (Flusher, Hijacker, ReaderFrom, Pusher) the wrapped writer has.
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

// Status is the final status written, 0 before one was.
func (rw *responseWriter) Status() int { return rw.code }

// BytesWritten is the number of body bytes written.
func (rw *responseWriter) BytesWritten() int { return rw.bytes }

// Unwrap returns the wrapped writer, for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }

// flushError flushes through the wrapped writer's FlushError when it has one,
// so that a write error reaches the handler, else its Flush.
func (rw *responseWriter) flushError() error {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	switch f := rw.w.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
		return nil
	}
	return http.ErrNotSupported
}

func (rw *responseWriter) hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := rw.w.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, http.ErrNotSupported
}

// readFrom keeps net/http's sendfile path for io.Copy into the answer.
func (rw *responseWriter) readFrom(r io.Reader) (int64, error) {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	rf, ok := rw.w.(io.ReaderFrom)
	if !ok {
		return 0, http.ErrNotSupported
	}
	n, err := rf.ReadFrom(r)
	rw.bytes += int(n)
	return n, err
}

func (rw *responseWriter) push(target string, opts *http.PushOptions) error {
	if p, ok := rw.w.(http.Pusher); ok {
		return p.Push(target, opts)
	}
	return http.ErrNotSupported
}

// The writer a handler gets, by what the wrapped writer can do.
type (
	basicWriter       struct{ *responseWriter }
	flushWriter       struct{ *responseWriter }
	hijackWriter      struct{ *responseWriter }
	flushHijackWriter struct{ *responseWriter }
	fancyWriter       struct{ *responseWriter } // Flusher, Hijacker, ReaderFrom
	http2Writer       struct{ *responseWriter } // Flusher, Pusher
)

// Flush implements http.Flusher.
func (w flushWriter) Flush() { _ = w.flushError() }

// Flush implements http.Flusher.
func (w flushHijackWriter) Flush() { _ = w.flushError() }

// Flush implements http.Flusher.
func (w fancyWriter) Flush() { _ = w.flushError() }

// Flush implements http.Flusher.
func (w http2Writer) Flush() { _ = w.flushError() }

// FlushError flushes and reports a write error.
func (w flushWriter) FlushError() error { return w.flushError() }

// FlushError flushes and reports a write error.
func (w flushHijackWriter) FlushError() error { return w.flushError() }

// FlushError flushes and reports a write error.
func (w fancyWriter) FlushError() error { return w.flushError() }

// FlushError flushes and reports a write error.
func (w http2Writer) FlushError() error { return w.flushError() }

// Hijack implements http.Hijacker.
func (w hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }

// Hijack implements http.Hijacker.
func (w flushHijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }

// Hijack implements http.Hijacker.
func (w fancyWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }

// ReadFrom implements io.ReaderFrom.
func (w fancyWriter) ReadFrom(r io.Reader) (int64, error) { return w.readFrom(r) }

// Push implements http.Pusher.
func (w http2Writer) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }

// wrap starts measuring w and returns the writer the handler gets.
func (rw *responseWriter) wrap(w http.ResponseWriter, protoMajor int) http.ResponseWriter {
	rw.w = w
	_, fl := w.(http.Flusher)
	if protoMajor == 2 {
		if _, ps := w.(http.Pusher); fl && ps {
			return http2Writer{rw}
		}
	} else {
		_, hj := w.(http.Hijacker)
		_, rf := w.(io.ReaderFrom)
		switch {
		case fl && hj && rf:
			return fancyWriter{rw}
		case fl && hj:
			return flushHijackWriter{rw}
		case hj:
			return hijackWriter{rw}
		}
	}
	if fl {
		return flushWriter{rw}
	}
	return basicWriter{rw}
}
