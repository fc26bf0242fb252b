package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/redisfx/redisfx/bench/internal/local"
	"github.com/redisfx/redisfx/bench/load"
)

// recv is an OTLP/HTTP trace receiver in the benchmark process: it decodes
// each export and counts its bytes and spans, and the shapes of the spans
// (scope, name, kind, attribute keys), so that the table can show that two
// servers export the same spans.
type recv struct {
	addr         string
	bytes, spans atomic.Int64
	mu           sync.Mutex
	shapes       map[string]int64
	srv          *http.Server
}

func receiver() *recv {
	rc := &recv{addr: local.FreeAddr(), shapes: map[string]int64{}}
	rc.srv = &http.Server{Addr: rc.addr, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(rc.serve)}
	go func() { _ = rc.srv.ListenAndServe() }()
	local.WaitListening(rc.addr)
	return rc
}

func (rc *recv) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	rc.bytes.Add(int64(len(raw)))
	if r.Header.Get("Content-Encoding") == "gzip" {
		if zr, err := gzip.NewReader(strings.NewReader(string(raw))); err == nil {
			raw, _ = io.ReadAll(zr)
		}
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var n int64
	seen := map[string]int64{}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				n++
				keys := make([]string, 0, len(sp.Attributes))
				for _, a := range sp.Attributes {
					keys = append(keys, a.Key)
				}
				sort.Strings(keys)
				seen[fmt.Sprintf("%s %q %s [%s]", ss.Scope.GetName(), sp.Name, sp.Kind, strings.Join(keys, " "))]++
			}
		}
	}
	rc.spans.Add(n)
	rc.mu.Lock()
	for k, v := range seen {
		rc.shapes[k] += v
	}
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// takeShapes returns the shapes counted since the last call, and forgets
// them.
func (rc *recv) takeShapes() map[string]int64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s := rc.shapes
	rc.shapes = map[string]int64{}
	return s
}

func (rc *recv) close() { _ = rc.srv.Close() }

// printShapes writes to stderr the spans one server exported on one path,
// by shape, each with its count.
func printShapes(server string, path load.Keys, shapes map[string]int64) {
	keys := make([]string, 0, len(shapes))
	for k := range shapes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(os.Stderr, "  spans %s %s: %d × %s\n", server, path, shapes[k], k)
	}
}
