package doccheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/cachefx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/lockfx"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/ratelimitfx"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/streamfx"
	"github.com/redisfx/redisfx/tracingfx"
)

// catalogueRow is one row of the span catalogue of docs/tracing.md.
type catalogueRow struct {
	names  []string // span names; "METHOD /route" and "redis.<COMMAND>" are patterns
	kind   string
	attrs  map[string]bool
	open   bool // the attribute list ends in "…": more keys may appear
	events map[string]bool
	status string
	onFail map[string]bool // attribute keys and events named in the Status column
}

var backticked = regexp.MustCompile("`([^`]+)`")

// catalogue parses the table under "## Span catalogue" in docs/tracing.md:
// | Span | Kind | Attributes | Events | Status |, names, keys and events
// in backticks (a key may be written `key`=`value`).
func catalogue(t *testing.T) []catalogueRow {
	t.Helper()
	root, _ := filepath.Abs("../..")
	raw, err := os.ReadFile(filepath.Join(root, "docs", "tracing.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Span catalogue\n")
	if !ok {
		t.Fatal("docs/tracing.md has no \"## Span catalogue\" section")
	}
	var rows []catalogueRow
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ") {
			break
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 5 {
			t.Errorf("docs/tracing.md: a catalogue row of %d cells, want 5: %s", len(cells), line)
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		r := catalogueRow{kind: strings.Trim(cells[1], "` "), attrs: map[string]bool{}, events: map[string]bool{},
			open: strings.Contains(cells[2], "…"), status: cells[4], onFail: map[string]bool{}}
		names, _, _ := strings.Cut(cells[0], " (") // examples in parentheses are not names
		for _, m := range backticked.FindAllStringSubmatch(names, -1) {
			r.names = append(r.names, m[1])
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			if k, _, _ := strings.Cut(m[1], "="); !strings.Contains(cells[2], "=`"+m[1]+"`") {
				r.attrs[k] = true
			}
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[3], -1) {
			r.events[m[1]] = true
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[4], -1) {
			r.onFail[m[1]] = true
		}
		rows = append(rows, r)
	}
	if len(rows) < 10 {
		t.Fatalf("docs/tracing.md: %d catalogue rows parsed: the parser or the table is broken", len(rows))
	}
	return rows
}

// scopeSentence is the catalogue's statement of the instrumentation scopes.
var scopeSentence = regexp.MustCompile("SERVER spans have the instrumentation scope `([^`]+)` \\(`httpfx.TracerName`\\); every other span has `([^`]+)` \\(`plugintrace.ScopeName`\\)")

// scopes are the instrumentation scopes docs/tracing.md states for the
// SERVER spans and for every other span, which must be the constants'.
func scopes(t *testing.T) (server, other string) {
	t.Helper()
	root, _ := filepath.Abs("../..")
	raw, err := os.ReadFile(filepath.Join(root, "docs", "tracing.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := scopeSentence.FindStringSubmatch(strings.Join(strings.Fields(string(raw)), " "))
	if m == nil {
		t.Fatalf("docs/tracing.md does not state the scopes (%s)", scopeSentence)
	}
	if m[1] != httpfx.TracerName || m[2] != plugintrace.ScopeName {
		t.Fatalf("docs/tracing.md states the scopes %s and %s; httpfx.TracerName is %s, plugintrace.ScopeName %s",
			m[1], m[2], httpfx.TracerName, plugintrace.ScopeName)
	}
	return m[1], m[2]
}

var serverSpan = regexp.MustCompile(`^[A-Z]+ /`)

// row finds the catalogue row of a span name: the row that names it, else
// the first whose pattern matches it.
func row(rows []catalogueRow, name string) (catalogueRow, bool) {
	for _, r := range rows {
		for _, n := range r.names {
			if n == name {
				return r, true
			}
		}
	}
	for _, r := range rows {
		for _, n := range r.names {
			switch {
			case n == "METHOD /route" && serverSpan.MatchString(name),
				n == "redis.<COMMAND>" && strings.HasPrefix(name, "redis."):
				return r, true
			}
		}
	}
	return catalogueRow{}, false
}

// observed is what the run recorded of one span name.
type observed struct {
	kinds    map[string]bool
	statuses map[string]bool
	scopes   map[string]bool // instrumentation scope names
	attrs    map[string]bool
	events   map[string]bool
}

// TestSpanCatalogueMatchesTheSpans runs every module against a private
// redis-server with an SDK span recorder, driving each span the
// catalogue lists (failures included), and checks both ways: every span
// made is in the catalogue with its kind, its attribute keys, events and
// status codes are documented; every documented span name and attribute
// key was seen. (Documented events are not all driven: some need a store
// outage or a concurrent load in another process.)
func TestSpanCatalogueMatchesTheSpans(t *testing.T) {
	seen := runEveryModule(t)

	if os.Getenv("REDISFX_DUMP_SPANS") != "" {
		names := make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			t.Logf("%s %v %v\n  attrs %v\n  events %v", n, keys(seen[n].kinds), keys(seen[n].statuses), keys(seen[n].attrs), keys(seen[n].events))
		}
	}
	rows := catalogue(t)
	serverScope, otherScope := scopes(t)

	byRow := map[int]*observed{}
	for name, o := range seen {
		r, ok := row(rows, name)
		if !ok {
			t.Errorf("span %s is not in the catalogue of docs/tracing.md", name)
			continue
		}
		for k := range o.kinds {
			if k != r.kind {
				t.Errorf("span %s: kind %s, the catalogue says %s", name, k, r.kind)
			}
		}
		wantScope := otherScope
		if r.kind == "SERVER" {
			wantScope = serverScope
		}
		for sc := range o.scopes {
			if sc != wantScope {
				t.Errorf("span %s: instrumentation scope %s, docs/tracing.md says %s", name, sc, wantScope)
			}
		}
		for a := range o.attrs {
			if !r.attrs[a] && !r.onFail[a] && !r.open {
				t.Errorf("span %s: attribute %s is not in the catalogue", name, a)
			}
		}
		for e := range o.events {
			if !r.events[e] && !r.onFail[e] {
				t.Errorf("span %s: event %s is not in the catalogue", name, e)
			}
		}
		for st := range o.statuses {
			if !strings.Contains(r.status, st) {
				t.Errorf("span %s: status %s, which the catalogue's status column does not name (%s)", name, st, r.status)
			}
		}
		i := indexOf(rows, r)
		if byRow[i] == nil {
			byRow[i] = &observed{attrs: map[string]bool{}, events: map[string]bool{}}
		}
		for a := range o.attrs {
			byRow[i].attrs[a] = true
		}
		for e := range o.events {
			byRow[i].events[e] = true
		}
		byRow[i].attrs["name:"+name] = true
	}
	for i, r := range rows {
		o := byRow[i]
		if o == nil {
			t.Errorf("no span of the catalogue row %v was made", r.names)
			continue
		}
		for _, n := range r.names {
			if !strings.Contains(n, "<") && !strings.Contains(n, "METHOD") && !o.attrs["name:"+n] {
				t.Errorf("catalogue span %s was not made", n)
			}
		}
		for a := range r.attrs {
			if !o.attrs[a] {
				t.Errorf("catalogue row %v: attribute %s was never seen", r.names, a)
			}
		}
	}
}

func indexOf(rows []catalogueRow, r catalogueRow) int {
	for i := range rows {
		if fmt.Sprint(rows[i].names) == fmt.Sprint(r.names) {
			return i
		}
	}
	return -1
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// runEveryModule builds an app of every module on a recording
// TracerProvider, drives every span, and returns what was recorded by
// span name.
func runEveryModule(t *testing.T) map[string]*observed {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	srv := redistest.StartPrivate(t)
	prefix := redistest.Prefix(t)
	const okStream, failStream = "catalogue.ok", "catalogue.fail"
	handled := make(chan struct{}, 4)
	entered, release := make(chan struct{}, 1), make(chan struct{})

	var (
		locks   *lockfx.Locker
		cache   *cachefx.Cache
		streams *streamfx.Streams
		server  *httpfx.Server
		rdb     redis.UniversalClient
	)
	app := fx.New(
		fx.NopLogger,
		fx.Supply(zap.NewNop()),
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		fx.Supply(&tracingfx.Config{PluginTracing: true, Spans: tracingfx.SpanConfig{IncludeArgs: true, IncludeResult: true}}),
		fx.Supply(&httpfx.Config{Addr: "127.0.0.1:0"}),
		fx.Supply(&idempotencyfx.Config{KeyPrefix: prefix + "idem:", WaitTimeout: 5 * time.Second}),
		fx.Supply(&lockfx.Config{KeyPrefix: prefix + "lock:", Attempts: 2, Backoff: time.Millisecond}),
		fx.Supply(&cachefx.Config{KeyPrefix: prefix + "cache:"}),
		fx.Supply(&ratelimitfx.Config{KeyPrefix: prefix + "rl:", Limit: 2, Window: time.Minute}),
		fx.Supply(&streamfx.Config{Group: "catalogue", MaxAttempts: 1, Block: 50 * time.Millisecond}),
		storefx.Module, tracingfx.Module, tracingfx.UseTracerProvider(func() *sdktrace.TracerProvider { return tp }),
		idempotencyfx.Module, cachefx.Module, lockfx.Module, ratelimitfx.Module, streamfx.Module, httpfx.Module,
		fx.Provide(httpfx.AsRoutes(func(l *ratelimitfx.Limiter) httpfx.Routes {
			return func(r chi.Router) {
				r.With(l.Limit(ratelimitfx.Rule{Name: "pay"}), idempotencyfx.Idempotent()).Post("/pay", func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("X-Slow") != "" {
						entered <- struct{}{}
						<-release
					}
					w.WriteHeader(http.StatusCreated)
				})
			}
		})),
		fx.Provide(streamfx.AsHandler(func() streamfx.StreamHandler {
			return streamfx.StreamHandler{Stream: okStream, Handler: func(context.Context, streamfx.Message) error { handled <- struct{}{}; return nil }}
		})),
		fx.Provide(streamfx.AsHandler(func() streamfx.StreamHandler {
			return streamfx.StreamHandler{Stream: failStream, Handler: func(context.Context, streamfx.Message) error { handled <- struct{}{}; return errors.New("refused") }}
		})),
		fx.Populate(&locks, &cache, &streams, &server, &rdb),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = app.Stop(ctx)
			_ = tp.Shutdown(ctx)
		}
	}
	t.Cleanup(stop)

	post := func(key string, slow bool) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+server.Addr()+"/pay", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		if slow {
			req.Header.Set("X-Slow", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// A request executed while its duplicate waits (idempotency.wait),
	// then one over the limit (a blocked rate_limit.check).
	first := make(chan int, 1)
	go func() { first <- post("k1", true) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached its handler")
	}
	second := make(chan int, 1)
	go func() { second <- post("k1", false) }()
	waitFor(t, "the duplicate's idempotency.wait", func() bool { return startedSpan(rec, "idempotency.wait") })
	close(release)
	if a, b := <-first, <-second; a != http.StatusCreated || b != http.StatusCreated {
		t.Fatalf("the first request and its duplicate answered %d and %d", a, b)
	}
	if s := post("k2", false); s != http.StatusTooManyRequests {
		t.Fatalf("the third request answered %d, want 429", s)
	}

	// Locks: taken, refused (held), released.
	lock, err := locks.Acquire(ctx, "order-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.Acquire(ctx, "order-1"); !errors.Is(err, lockfx.ErrNotAcquired) {
		t.Fatalf("second acquire: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Cache: a miss, a store, a hit, a load, a tag invalidation, a delete.
	_, _, _ = cache.Get(ctx, "sku-1")
	if err := cache.Set(ctx, "sku-1", []byte("{}"), time.Minute, "shoes"); err != nil {
		t.Fatal(err)
	}
	_, _, _ = cache.Get(ctx, "sku-1")
	if _, err := cache.GetOrLoad(ctx, "sku-2", time.Minute, func(context.Context) ([]byte, error) { return []byte("{}"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := cache.InvalidateByTags(ctx, "shoes"); err != nil {
		t.Fatal(err)
	}
	if _, err := cache.Delete(ctx, "sku-2"); err != nil {
		t.Fatal(err)
	}

	// Streams: one message handled and acknowledged, one dead-lettered.
	for _, st := range []string{okStream, failStream} {
		if _, err := streams.Publish(ctx, st, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-handled:
		case <-time.After(10 * time.Second):
			t.Fatalf("the message on %s was never handled", st)
		}
	}
	waitFor(t, "stream.ack and stream.move_to_dlq", func() bool { return endedSpan(rec, "stream.ack") && endedSpan(rec, "stream.move_to_dlq") })

	// Redis commands: one, a failing one, a pipeline and a transaction.
	_ = rdb.Set(ctx, prefix+"s", "v", time.Minute).Err()
	_ = rdb.LPush(ctx, prefix+"s", "x").Err() // WRONGTYPE
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, prefix+"s"); p.Get(ctx, prefix+"t"); return nil })
	_, _ = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Incr(ctx, prefix+"n"); return nil })

	stop()
	seen := map[string]*observed{}
	for _, s := range rec.Ended() {
		o := seen[s.Name()]
		if o == nil {
			o = &observed{kinds: map[string]bool{}, statuses: map[string]bool{}, scopes: map[string]bool{}, attrs: map[string]bool{}, events: map[string]bool{}}
			seen[s.Name()] = o
		}
		o.kinds[strings.ToUpper(s.SpanKind().String())] = true
		o.scopes[s.InstrumentationScope().Name] = true
		o.statuses[strings.ToUpper(s.Status().Code.String())] = true
		for _, a := range s.Attributes() {
			o.attrs[string(a.Key)] = true
		}
		for _, e := range s.Events() {
			o.events[e.Name] = true
		}
	}
	return seen
}

func startedSpan(rec *tracetest.SpanRecorder, name string) bool {
	for _, s := range rec.Started() {
		if s.Name() == name {
			return true
		}
	}
	return false
}

func endedSpan(rec *tracetest.SpanRecorder, name string) bool {
	for _, s := range rec.Ended() {
		if s.Name() == name {
			return true
		}
	}
	return false
}

// waitFor polls cond (spans have no signal of their own) for at most 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
