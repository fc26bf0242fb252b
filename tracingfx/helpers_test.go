package tracingfx

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP trace backend that decodes what it is sent.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	logs  []*logspb.LogRecord
	// logScopes is the instrumentation scope of each of logs.
	logScopes []string
	service   []string
	// resource holds every resource attribute received (string values).
	resource map[string]string
	paths    []string
	headers  []http.Header
	// logHeaders are the headers of each log export.
	logHeaders []http.Header
	status     int // answer status; 0 = 200
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body = zr
	}
	raw, _ := io.ReadAll(body)
	if strings.HasSuffix(r.URL.Path, "/v1/logs") {
		var lreq collogspb.ExportLogsServiceRequest
		if err := proto.Unmarshal(raw, &lreq); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		rc.mu.Lock()
		rc.logHeaders = append(rc.logHeaders, r.Header.Clone())
		for _, rl := range lreq.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				rc.logs = append(rc.logs, sl.LogRecords...)
				for range sl.LogRecords {
					rc.logScopes = append(rc.logScopes, sl.GetScope().GetName())
				}
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&collogspb.ExportLogsServiceResponse{})
		_, _ = w.Write(out)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	rc.mu.Lock()
	rc.paths = append(rc.paths, r.URL.Path)
	rc.headers = append(rc.headers, r.Header.Clone())
	status := rc.status
	if status == 0 {
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.Resource.GetAttributes() {
				if a.Key == "service.name" {
					rc.service = append(rc.service, a.Value.GetStringValue())
				}
				if rc.resource == nil {
					rc.resource = map[string]string{}
				}
				rc.resource[a.Key] = a.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
	}
	rc.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func (rc *receiver) got() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...)
}

func spanNamed(spans []*tracepb.Span, name string) *tracepb.Span {
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func attrOf(attrs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return nil
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// syncBuffer is a goroutine-safe console sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines parses the console output, one JSON object per line.
func (s *syncBuffer) lines(t *testing.T) []ConsoleSpan {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ConsoleSpan
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var cs ConsoleSpan
		if err := json.Unmarshal(sc.Bytes(), &cs); err != nil {
			t.Fatalf("console line is not one JSON object: %q: %v", sc.Text(), err)
		}
		out = append(out, cs)
	}
	return out
}

func consoleNamed(spans []ConsoleSpan, name string) *ConsoleSpan {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}

// grpcReceiver is an OTLP/gRPC trace and log backend that keeps what it
// is sent, with the metadata of each export.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr     string
	mu       sync.Mutex
	spans    []*tracepb.Span
	logs     []*logspb.LogRecord
	metadata []metadata.MD
}

func newGRPCReceiver(t *testing.T) *grpcReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &grpcReceiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rc)
	collogspb.RegisterLogsServiceServer(srv, logsService{rc: rc})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return rc
}

// Export implements the OTLP trace service.
func (rc *grpcReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.metadata = append(rc.metadata, md)
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			rc.spans = append(rc.spans, ss.Spans...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// logsService adapts the receiver to the OTLP logs service, whose method
// is also called Export.
type logsService struct {
	collogspb.UnimplementedLogsServiceServer
	rc *grpcReceiver
}

func (l logsService) Export(_ context.Context, req *collogspb.ExportLogsServiceRequest) (*collogspb.ExportLogsServiceResponse, error) {
	l.rc.mu.Lock()
	defer l.rc.mu.Unlock()
	for _, rl := range req.ResourceLogs {
		for _, sl := range rl.ScopeLogs {
			l.rc.logs = append(l.rc.logs, sl.LogRecords...)
		}
	}
	return &collogspb.ExportLogsServiceResponse{}, nil
}

func (rc *grpcReceiver) got() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...)
}
