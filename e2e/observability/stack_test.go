package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// speedup divides every duration of the rules and the routing: the
// production rules run 60 times faster (5 minutes become 5 seconds).
const speedup = 60

// Scrape and evaluation every second, with the one-second scrape timeout
// that once made StoreConnectionLost impossible.
const prometheusConfig = `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['%s']
scrape_configs:
  - job_name: payments
    static_configs:
      - targets: ['%s']
`

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// tool finds a Prometheus program: a missing one fails the run in CI and
// skips it elsewhere, saying what to install.
func tool(t *testing.T, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s is not installed (apt-get install prometheus prometheus-alertmanager)", names[0])
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// daemon is a process the test started; it is killed when the test ends.
type daemon struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuf
	done chan struct{}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startDaemon(t *testing.T, name string, env []string, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{name: name, cmd: exec.Command(bin, args...), out: &syncBuf{}, done: make(chan struct{})}
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGCONT) // in case a test left it stopped
		_ = d.cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("%s output (last 4 kB):\n%s", name, tail(d.out.String(), 4096))
		}
	})
	return d
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// waitHTTP waits until url answers 200.
func waitHTTP(t *testing.T, d *daemon, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-d.done:
			t.Fatalf("%s exited:\n%s", d.name, tail(d.out.String(), 4096))
		default:
		}
		if r, err := http.Get(url); err == nil {
			_ = r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %s in 60s:\n%s", d.name, url, tail(d.out.String(), 4096))
		}
		time.Sleep(50 * time.Millisecond) // polling a process that is starting
	}
}

// generate runs the rule generator.
func generate(t *testing.T, file string, args ...string) {
	t.Helper()
	out, err := exec.Command(alertsBin, args...).Output()
	if err != nil {
		t.Fatalf("redisfx-alerts %v: %v", args, err)
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ---- the trace backend: an OTLP/HTTP receiver the test queries ----

// span is one received span, flattened for assertions.
type span struct {
	TraceID, SpanID, ParentID string
	Name, Kind                string
	Attrs                     map[string]string
	Events                    []string
	EventAttrs                []string // every event attribute value
	Status, StatusMessage     string
	Resource                  map[string]string
}

type traceBackend struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []span
	headers []http.Header
	refuse  bool // answer 500: the backend is failing
}

func startTraceBackend(t *testing.T) *traceBackend {
	b := &traceBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(b.receive))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *traceBackend) setRefusing(on bool) {
	b.mu.Lock()
	b.refuse = on
	b.mu.Unlock()
}

func (b *traceBackend) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	refuse := b.refuse
	b.headers = append(b.headers, r.Header.Clone())
	b.mu.Unlock()
	if refuse {
		http.Error(w, "backend failing", http.StatusInternalServerError)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []span
	for _, rs := range req.ResourceSpans {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := span{TraceID: fmt.Sprintf("%x", s.TraceId), SpanID: fmt.Sprintf("%x", s.SpanId), ParentID: fmt.Sprintf("%x", s.ParentSpanId),
					Name: s.Name, Kind: strings.TrimPrefix(s.Kind.String(), "SPAN_KIND_"), Attrs: attrMap(s.Attributes),
					Status: strings.TrimPrefix(s.GetStatus().GetCode().String(), "STATUS_CODE_"), StatusMessage: s.GetStatus().GetMessage(), Resource: res}
				for _, e := range s.Events {
					sp.Events = append(sp.Events, e.Name)
					for _, v := range attrMap(e.Attributes) {
						sp.EventAttrs = append(sp.EventAttrs, v)
					}
				}
				got = append(got, sp)
			}
		}
	}
	b.mu.Lock()
	b.spans = append(b.spans, got...)
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = anyValue(kv.Value)
	}
	return m
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, anyValue(e))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// received returns the headers of every export request.
func (b *traceBackend) received() []http.Header {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]http.Header(nil), b.headers...)
}

func (b *traceBackend) all() []span {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]span(nil), b.spans...)
}

// ---- the webhooks Alertmanager notifies ----

// notification is one webhook call, with the time it arrived.
type notification struct {
	At       time.Time
	Receiver string
	Status   string
	Alerts   []struct {
		Status   string            `json:"status"`
		Labels   map[string]string `json:"labels"`
		StartsAt time.Time         `json:"startsAt"`
	} `json:"alerts"`
}

type webhooks struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []notification
}

func startWebhooks(t *testing.T) *webhooks {
	h := &webhooks{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n notification
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.At = time.Now()
		n.Receiver = strings.TrimPrefix(r.URL.Path, "/")
		h.mu.Lock()
		h.got = append(h.got, n)
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// find returns the first notification to receiver, after since, that
// carries alertname with status, and whether there is one.
func (h *webhooks) find(receiver, alertname, status string, since time.Time) (notification, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.got {
		if n.Receiver != receiver || n.At.Before(since) {
			continue
		}
		for _, a := range n.Alerts {
			if a.Labels["alertname"] == alertname && a.Status == status {
				return n, true
			}
		}
	}
	return notification{}, false
}

// received lists (receiver, alertname) of every firing notification since.
func (h *webhooks) received(since time.Time) map[string][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]string{}
	for _, n := range h.got {
		if n.At.Before(since) {
			continue
		}
		for _, a := range n.Alerts {
			if a.Status == "firing" {
				out[a.Labels["alertname"]] = appendNew(out[a.Labels["alertname"]], n.Receiver)
			}
		}
	}
	return out
}

func appendNew(list []string, s string) []string {
	for _, v := range list {
		if v == s {
			return list
		}
	}
	return append(list, s)
}

// ---- Prometheus's view ----

type promAPI struct{ base string }

// alertState returns the state of alertname in Prometheus ("firing",
// "pending" or "" when inactive).
func (p promAPI) alertState(t *testing.T, alertname string) string {
	t.Helper()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/alerts", &body)
	state := ""
	for _, a := range body.Data.Alerts {
		if a.Labels["alertname"] == alertname && (state == "" || a.State == "firing") {
			state = a.State
		}
	}
	return state
}

// firing lists the alerts firing now.
func (p promAPI) firing(t *testing.T) []string {
	t.Helper()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/alerts", &body)
	var out []string
	for _, a := range body.Data.Alerts {
		if a.State == "firing" {
			out = appendNew(out, a.Labels["alertname"])
		}
	}
	return out
}

// query evaluates an instant query and returns the first sample's value,
// or "" when the result is empty.
func (p promAPI) query(t *testing.T, q string) string {
	t.Helper()
	var body struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/query?query="+urlEscape(q), &body)
	if len(body.Data.Result) == 0 {
		return ""
	}
	return fmt.Sprint(body.Data.Result[0].Value[1])
}

func urlEscape(s string) string {
	r := strings.NewReplacer("%", "%25", " ", "%20", "+", "%2B", "&", "%26", "{", "%7B", "}", "%7D", "\"", "%22", "=", "%3D", "#", "%23")
	return r.Replace(s)
}

func (p promAPI) get(t *testing.T, path string, into any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
	defer r.Body.Close()
	if err := json.NewDecoder(r.Body).Decode(into); err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
}

// writeFile writes content into dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
