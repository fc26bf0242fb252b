package httpfx

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// sink is a writer with nothing optional: it records what reaches it.
type sink struct {
	header   http.Header
	codes    []int
	body     strings.Builder
	flushed  bool
	hijacked bool
	readFrom bool
	pushed   string
}

func (s *sink) Header() http.Header         { return s.header }
func (s *sink) WriteHeader(code int)        { s.codes = append(s.codes, code) }
func (s *sink) Write(b []byte) (int, error) { return s.body.Write(b) }
func (s *sink) flush()                      { s.flushed = true }
func (s *sink) hijack() (net.Conn, *bufio.ReadWriter, error) {
	s.hijacked = true
	return nil, nil, nil
}

// Fakes of what a server's writer may offer, alone and together.
type (
	plainW       struct{ *sink }
	flushW       struct{ *sink }
	hijackW      struct{ *sink }
	flushHijackW struct{ *sink }
	fancyW       struct{ *sink }
	h2W          struct{ *sink }
)

func (w flushW) Flush()                                             { w.flush() }
func (w flushHijackW) Flush()                                       { w.flush() }
func (w fancyW) Flush()                                             { w.flush() }
func (w h2W) Flush()                                                { w.flush() }
func (w hijackW) Hijack() (net.Conn, *bufio.ReadWriter, error)      { return w.hijack() }
func (w flushHijackW) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }
func (w fancyW) Hijack() (net.Conn, *bufio.ReadWriter, error)       { return w.hijack() }
func (w h2W) Push(target string, _ *http.PushOptions) error         { w.pushed = target; return nil }
func (w fancyW) ReadFrom(r io.Reader) (int64, error) {
	w.readFrom = true
	return io.Copy(&w.body, r)
}

// The wrap offers exactly the optional interfaces the wrapped writer has
// (a handler or http.ResponseController probing for one must find it only
// where it works), passes each through, and measures what goes out.
func TestResponseWriter_OffersWhatTheWrappedWriterOffers(t *testing.T) {
	t.Parallel()
	type offers struct{ flush, hijack, readFrom, push bool }
	for _, tc := range []struct {
		name  string
		w     func(*sink) http.ResponseWriter
		proto int
		want  offers
	}{
		{"plain", func(s *sink) http.ResponseWriter { return plainW{s} }, 1, offers{}},
		{"flush", func(s *sink) http.ResponseWriter { return flushW{s} }, 1, offers{flush: true}},
		{"hijack", func(s *sink) http.ResponseWriter { return hijackW{s} }, 1, offers{hijack: true}},
		{"flush+hijack", func(s *sink) http.ResponseWriter { return flushHijackW{s} }, 1, offers{flush: true, hijack: true}},
		{"HTTP/1 server", func(s *sink) http.ResponseWriter { return fancyW{s} }, 1, offers{flush: true, hijack: true, readFrom: true}},
		{"HTTP/2 server", func(s *sink) http.ResponseWriter { return h2W{s} }, 2, offers{flush: true, push: true}},
		{"HTTP/2 without push", func(s *sink) http.ResponseWriter { return flushW{s} }, 2, offers{flush: true}},
		{"hijacker over HTTP/2", func(s *sink) http.ResponseWriter { return fancyW{s} }, 2, offers{flush: true}},
		{"plain over HTTP/2", func(s *sink) http.ResponseWriter { return plainW{s} }, 2, offers{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &sink{header: http.Header{}}
			var state requestState
			w := state.writer.wrap(tc.w(out), tc.proto)
			_, fl := w.(http.Flusher)
			_, hj := w.(http.Hijacker)
			_, rf := w.(io.ReaderFrom)
			_, ps := w.(http.Pusher)
			if got := (offers{fl, hj, rf, ps}); got != tc.want {
				t.Fatalf("offers %+v, want %+v", got, tc.want)
			}
			if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); !ok || u.Unwrap() != tc.w(out) {
				t.Fatal("Unwrap does not give the wrapped writer (http.ResponseController needs it)")
			}
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints) // informational: sent, not the answer's status
			if state.writer.code != 0 || out.header.Get("Link") == "" {
				t.Fatalf("status %d after a 103, header %v", state.writer.code, out.header)
			}
			wantCodes := []int{http.StatusEarlyHints, http.StatusCreated}
			if fl {
				w.(http.Flusher).Flush() // before any status: an implicit 200
				if !out.flushed || state.writer.code != http.StatusOK {
					t.Fatalf("flushed %v, status %d", out.flushed, state.writer.code)
				}
				wantCodes = []int{http.StatusEarlyHints, http.StatusOK}
			}
			w.WriteHeader(http.StatusCreated)  // after a flush: too late, not passed on
			w.WriteHeader(http.StatusConflict) // a second final status: never passed on
			if n, err := io.WriteString(w, "abc"); err != nil || n != 3 {
				t.Fatalf("write %d %v", n, err)
			}
			wantBody := "abc"
			if rf {
				if _, err := w.(io.ReaderFrom).ReadFrom(strings.NewReader("defg")); err != nil || !out.readFrom {
					t.Fatalf("ReadFrom %v, reached the writer: %v", err, out.readFrom)
				}
				wantBody += "defg"
			}
			if hj {
				if _, _, err := w.(http.Hijacker).Hijack(); err != nil || !out.hijacked {
					t.Fatalf("Hijack %v, reached the writer: %v", err, out.hijacked)
				}
			}
			if ps {
				if err := w.(http.Pusher).Push("/a.css", nil); err != nil || out.pushed != "/a.css" {
					t.Fatalf("Push %v, reached the writer: %q", err, out.pushed)
				}
			}
			if fmt.Sprint(out.codes) != fmt.Sprint(wantCodes) {
				t.Fatalf("the writer got statuses %v, want %v", out.codes, wantCodes)
			}
			if state.writer.code != wantCodes[1] || state.writer.bytes != len(wantBody) || out.body.String() != wantBody {
				t.Fatalf("measured %d and %d bytes, sent %q; want %d, %q", state.writer.code, state.writer.bytes, out.body.String(), wantCodes[1], wantBody)
			}
		})
	}
}

// A body written with nothing before it is an implicit 200, as net/http
// sends it.
func TestResponseWriter_WriteAloneIsA200(t *testing.T) {
	t.Parallel()
	out := &sink{header: http.Header{}}
	var state requestState
	_, _ = state.writer.wrap(plainW{out}, 1).Write([]byte("x"))
	if fmt.Sprint(out.codes) != "[200]" || state.writer.code != 200 || state.writer.bytes != 1 {
		t.Fatalf("codes %v, measured %d and %d bytes", out.codes, state.writer.code, state.writer.bytes)
	}
}

// The wrap lives in the request's state: making the handler's writer
// allocates nothing.
func TestResponseWriter_WrapAllocatesNothing(t *testing.T) {
	w := http.ResponseWriter(fancyW{&sink{header: http.Header{}}})
	state := new(requestState)
	var sink http.ResponseWriter
	if n := testing.AllocsPerRun(100, func() { sink = state.writer.wrap(w, 1) }); n != 0 {
		t.Fatalf("%v allocations per wrap", n)
	}
	_ = sink
}
