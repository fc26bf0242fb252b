package tracingfx

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// tracedClient is a storefx client of url with command spans into memory.
func tracedClient(t *testing.T, url string, spans SpanConfig, reg prometheus.Registerer) (*storefx.Client, *memory) {
	t.Helper()
	m := newMemory(t)
	var metrics *CommandMetrics
	if reg != nil {
		var err error
		if metrics, err = NewCommandMetrics(reg); err != nil {
			t.Fatal(err)
		}
	}
	c, err := storefx.New("default", storefx.Config{URL: url}, Instrumentation(m, spans, metrics))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, m
}

func portOf(t testing.TB, addr string) int64 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int64(n)
}

func TestCommandSpans_NestUnderParent_SemconvAttributes_ArgsHidden(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{}, nil)
	key := redistest.Prefix(t) + "user:42:card"
	ctx, parent := m.Tracer("t").Start(context.Background(), "request")
	c.Set(ctx, key, "4242424242424242", time.Minute)
	parent.End()
	set := m.one(t, "redis.SET")
	if set.SpanKind != trace.SpanKindClient || set.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("SET span is %v under %v, want a CLIENT child of %v", set.SpanKind, set.Parent.SpanID(), parent.SpanContext().SpanID())
	}
	if set.InstrumentationScope.Name != plugintrace.ScopeName {
		t.Fatalf("scope %q, want %q", set.InstrumentationScope.Name, plugintrace.ScopeName)
	}
	a := attrsOf(set)
	want := map[attribute.Key]attribute.Value{
		"db.system.name":    attribute.StringValue("redis"),
		"db.system":         attribute.StringValue("redis"),
		"db.operation.name": attribute.StringValue("SET"),
		"db.operation":      attribute.StringValue("SET"),
		"db.namespace":      attribute.StringValue("0"),
		"db.statement":      attribute.StringValue("SET ? ? ? ?"),
		"server.address":    attribute.StringValue("127.0.0.1"),
		"server.port":       attribute.Int64Value(portOf(t, srv.Addr())),
		plugintrace.Client:  attribute.StringValue("default"),
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s = %v, want %v", k, a[k].String(), v.String())
		}
	}
	if _, ok := a[plugintrace.DurationMS]; !ok {
		t.Errorf("no %s", plugintrace.DurationMS)
	}
	for k, v := range a {
		// The card's whole number: a port such as 42421 holds "4242".
		if s := v.String(); strings.Contains(s, "4242424242424242") || strings.Contains(s, "user:42") {
			t.Fatalf("%s leaks a value: %q", k, s)
		}
	}
	if _, failed := a["error.type"]; failed || set.Status.Code != codes.Unset {
		t.Fatalf("a successful SET has status %v and error.type", set.Status)
	}
}

// db.namespace is the database index of the client.
func TestCommandSpans_DBNamespaceIsTheDatabaseIndex(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL()+"/3", SpanConfig{}, nil)
	c.Ping(context.Background())
	if got := attrsOf(m.one(t, "redis.PING"))["db.namespace"]; got != attribute.StringValue("3") {
		t.Fatalf("db.namespace = %v, want 3", got.String())
	}
}

func TestCommandSpans_ArgsAndResultWhenEnabled_Truncated(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{IncludeArgs: true, IncludeResult: true, MaxArgLength: 12}, nil)
	key := redistest.Prefix(t) + "k"
	c.Set(context.Background(), key, strings.Repeat("v", 50), time.Minute)
	c.Get(context.Background(), key)
	a := attrsOf(m.one(t, "redis.GET"))
	if args := a["db.statement.args"].AsString(); len(args) != 12 {
		t.Fatalf("args %q not cut at 12", args)
	}
	if res := a["db.statement.result"].AsString(); res != strings.Repeat("v", 12) {
		t.Fatalf("result %q", res)
	}
}

// go-redis writes an argument given as a pointer (to a string or a number)
// as the value it points to; the statement shows what Redis received, not
// an address.
func TestCommandSpans_PointerArgumentsShownAsSent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{IncludeArgs: true}, nil)
	key, value, ttl := redistest.Prefix(t)+"k", "pointed-to", int64(60000)
	var nilString *string
	if err := c.Do(context.Background(), "SET", &key, &value, "PX", &ttl).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(context.Background(), "SET", &key, nilString).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(context.Background(), key).Result(); err != nil || got != "" {
		t.Fatalf("a nil *string is written as %q (%v), want the empty string", got, err)
	}
	spans := m.named("redis.SET")
	if len(spans) != 2 {
		t.Fatalf("%d SET spans, want 2", len(spans))
	}
	for i, want := range []string{key + " pointed-to PX 60000", key + " "} {
		if got := attrsOf(spans[i])["db.statement.args"].AsString(); got != want {
			t.Errorf("SET %d: db.statement.args = %q, want %q", i, got, want)
		}
	}
}

// argString says what Redis receives: each argument is echoed back by a
// real Redis (ECHO returns its argument's bytes as received) and compared.
func TestArgString_IsWhatRedisReceives(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	defer c.Close()
	s, n, yes, d := "text", int64(60000), true, 1500*time.Millisecond
	when := time.Date(2026, 11, 27, 2, 40, 0, 123456789, time.UTC)
	var nilString *string
	var nilInt *int64
	var nilTime *time.Time
	where, _ := url.Parse("redis://host:6379/0")
	for _, arg := range []any{"plain", []byte("bytes"), 42, int64(-7), uint8(200), 1e21, float32(0.1), 0.5, true, false,
		d, when, where, &s, &n, &yes, &d, &when, nilString, nilInt, nilTime} {
		got, err := c.Echo(context.Background(), arg).Result()
		if err != nil {
			t.Fatalf("ECHO %T: %v", arg, err)
		}
		if want := argString(arg); want != got {
			t.Errorf("argString(%T %v) = %q, Redis received %q", arg, arg, want, got)
		}
	}
}

func TestCommandSpans_ExcludedCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{ExcludeCommands: []string{"ping"}}, nil)
	c.Ping(context.Background())
	c.Time(context.Background())
	if names := namesOf(m.spans()); len(names) != 1 || names[0] != "redis.TIME" {
		t.Fatalf("spans %v, want only redis.TIME", names)
	}
}

// An excluded command gets no span but is still measured: leaving it out of
// commands_total and errors_total would blind the error-rate alert to it.
func TestCommandSpans_ExcludedCommandsStillMeasured(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	reg := prometheus.NewRegistry()
	c, m := tracedClient(t, srv.URL(), SpanConfig{ExcludeCommands: []string{"INCR"}}, reg)
	ctx := context.Background()
	key := "tracingfx:excluded:measured"
	if err := c.Set(ctx, key, "not-a-number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := c.Incr(ctx, key).Err(); err == nil {
			t.Fatal("INCR of a string succeeded")
		}
	}
	if names := namesOf(m.spans()); len(names) != 1 || names[0] != "redis.SET" {
		t.Fatalf("spans %v, want only redis.SET", names)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var incr, incrObserved, failed float64
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			isIncr := len(mt.GetLabel()) == 1 && mt.GetLabel()[0].GetValue() == "INCR"
			switch {
			case mf.GetName() == "commands_total" && isIncr:
				incr = mt.GetCounter().GetValue()
			case mf.GetName() == "command_duration_seconds" && isIncr:
				incrObserved = float64(mt.GetHistogram().GetSampleCount())
			case mf.GetName() == "errors_total":
				failed = mt.GetCounter().GetValue()
			}
		}
	}
	if incr != 3 || incrObserved != 3 || failed != 3 {
		t.Fatalf("3 failed excluded INCRs: commands_total{INCR}=%v command_duration_seconds{INCR} count=%v errors_total=%v, want 3 each",
			incr, incrObserved, failed)
	}
}

// A failure carries the status ERROR, the exception, error.type and, for a
// Redis error, db.response.status_code (the error prefix). redis.Nil is an
// answer, not a failure.
func TestCommandSpans_ErrorTypeAndStatusCode(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c, m := tracedClient(t, srv.URL(), SpanConfig{}, reg)
	ctx := context.Background()
	key := redistest.Prefix(t) + "k"
	if err := c.Get(ctx, key).Err(); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	c.Set(ctx, key, "text", time.Minute)
	c.Incr(ctx, key)       // ERR value is not an integer
	c.LPush(ctx, key, "x") // WRONGTYPE Operation against a key …
	get := attrsOf(m.one(t, "redis.GET"))
	for _, k := range []attribute.Key{"error.type", "db.response.status_code", plugintrace.Error} {
		if _, ok := get[k]; ok {
			t.Errorf("a GET of a missing key has %s", k)
		}
	}
	for name, code := range map[string]string{"redis.INCR": "ERR", "redis.LPUSH": "WRONGTYPE"} {
		s := m.one(t, name)
		a := attrsOf(s)
		if s.Status.Code != codes.Error || a["error.type"].AsString() != code || a["db.response.status_code"].AsString() != code ||
			!a[plugintrace.Error].AsBool() || len(s.Events) == 0 || s.Events[0].Name != "exception" {
			t.Errorf("%s: status %v, attributes %v, events %v; want ERROR with error.type and db.response.status_code %s", name, s.Status, a, s.Events, code)
		}
	}
	if n := counted(t, reg, "errors_total", ""); n != 2 {
		t.Fatalf("errors_total = %v, want 2", n)
	}
}

// Errors that do not come from Redis have no status code; error.type says
// what they are, with few distinct values.
func TestCommandSpans_ErrorTypeOfClientSideFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	c, m := tracedClient(t, "redis://"+refused, SpanConfig{}, nil)
	c.Ping(context.Background())
	a := attrsOf(m.one(t, "redis.PING"))
	if got := a["error.type"].AsString(); got != "*net.OpError" {
		t.Errorf("refused connection: error.type = %q, want *net.OpError", got)
	}
	if _, ok := a["db.response.status_code"]; ok {
		t.Error("a refused connection has a db.response.status_code")
	}

	srv := redistest.Start(t)
	c2, m2 := tracedClient(t, srv.URL(), SpanConfig{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	c2.Ping(ctx)
	if got := attrsOf(m2.one(t, "redis.PING"))["error.type"].AsString(); got != "timeout" {
		t.Errorf("expired deadline: error.type = %q, want timeout", got)
	}
}

// counted is the value of the counter name in reg, of the series whose
// first label is label ("" for an unlabelled counter).
func counted(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.Metric {
			if label == "" || mt.Label[0].GetValue() == label {
				return mt.Counter.GetValue()
			}
		}
	}
	t.Fatalf("%s{%s} not exported", name, label)
	return 0
}

func TestCommandSpans_PipelineAndTransaction(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{}, nil)
	ctx := context.Background()
	key := redistest.Prefix(t) + "k"
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "1", time.Minute)
		p.Incr(ctx, key)
		return nil
	})
	_, _ = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, key)
		return nil
	})
	pl, tx := attrsOf(m.one(t, "redis.PIPELINE")), attrsOf(m.one(t, "redis.MULTI"))
	if pl["db.operation.batch.size"].AsInt64() != 2 || pl["db.statement"].AsString() != "SET ? ? ? ?\nINCR ?" || pl["db.operation.name"].AsString() != "PIPELINE" {
		t.Fatalf("pipeline span %v", pl)
	}
	if tx["db.operation.batch.size"].AsInt64() != 1 || tx["db.operation.name"].AsString() != "MULTI" {
		t.Fatalf("transaction span %v, want a batch of 1 (MULTI and EXEC frame it)", tx)
	}
}

// A pipeline whose command fails is a failed span, with the command's error.
func TestCommandSpans_PipelineWithAFailedCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, m := tracedClient(t, srv.URL(), SpanConfig{}, nil)
	ctx := context.Background()
	key := redistest.Prefix(t) + "k"
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "text", time.Minute)
		p.LPush(ctx, key, "x")
		return nil
	})
	if err == nil {
		t.Fatal("the pipeline did not fail")
	}
	s := m.one(t, "redis.PIPELINE")
	if a := attrsOf(s); s.Status.Code != codes.Error || a["error.type"].AsString() != "WRONGTYPE" || !strings.HasPrefix(s.Status.Description, "WRONGTYPE") {
		t.Fatalf("status %v, attributes %v", s.Status, a)
	}
}

// A SCRIPT LOAD is named after its subcommand, and the scripts preloaded at
// start make no span (a start is not a trace); they are still counted.
func TestCommandSpans_ScriptLoadNamed_PreloadQuiet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c, m := tracedClient(t, srv.URL(), SpanConfig{}, reg)
	ctx := context.Background()
	if err := scripts.Preload(ctx, c, redis.NewScript("return 1"), redis.NewScript("return 2")); err != nil {
		t.Fatal(err)
	}
	if names := namesOf(m.spans()); len(names) != 0 {
		t.Fatalf("preloading made spans %v", names)
	}
	if n := counted(t, reg, "commands_total", "SCRIPT"); n != 2 {
		t.Fatalf("commands_total{command=SCRIPT} = %v, want 2", n)
	}
	c.ScriptLoad(ctx, "return 3")
	if op := attrsOf(m.one(t, "redis.SCRIPT LOAD"))["db.operation.name"].AsString(); op != "SCRIPT LOAD" {
		t.Fatalf("db.operation.name = %q", op)
	}
}

// Handshake commands (HELLO, AUTH with the password, CLIENT SETNAME) make no spans.
func TestCommandSpans_HandshakeQuietAndCredentialsNeverTraced(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t, redistest.WithArgs("--requirepass", "s3cret-pw"))
	m := newMemory(t)
	c, err := storefx.New("default", storefx.Config{URL: "redis://:s3cret-pw@" + srv.Addr(), ClientName: "payments"},
		Instrumentation(m, SpanConfig{IncludeArgs: true}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Ping(context.Background())
	if names := namesOf(m.spans()); len(names) != 1 || names[0] != "redis.PING" {
		t.Fatalf("spans %v, want only redis.PING", names)
	}
	// Found by an adversary: a Sentinel's password commands were written
	// with their arguments (and Redis's error echoing them). Sent here to a
	// plain server, which refuses them and echoes the arguments.
	c.Do(context.Background(), "SENTINEL", "SET", "mymaster", "auth-pass", "s3cret-pw")
	c.Do(context.Background(), "SENTINEL", "CONFIG", "SET", "sentinel-pass", "s3cret-pw")
	if n := len(m.spans()); n != 3 {
		t.Fatalf("%d spans, want PING and the two SENTINEL commands", n)
	}
	for _, s := range m.spans() {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "s3cret-pw") {
				t.Errorf("the password reached %s of %s", kv.Key, s.Name)
			}
		}
		for _, ev := range s.Events {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.String(), "s3cret-pw") {
					t.Errorf("the password reached event %s's %s of %s", ev.Name, kv.Key, s.Name)
				}
			}
		}
		if strings.Contains(s.Status.Description, "s3cret-pw") {
			t.Errorf("the password reached the status of %s", s.Name)
		}
	}
}

func TestCommandSpans_SuppressedForBackgroundWork(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c, m := tracedClient(t, srv.URL(), SpanConfig{}, reg)
	key := redistest.Prefix(t) + "poll"
	quiet := plugintrace.WithoutCommandSpans(context.Background())
	c.Get(quiet, key)
	c.Pipelined(quiet, func(pl redis.Pipeliner) error { pl.Get(quiet, key); pl.Get(quiet, key); return nil })
	c.Incr(context.Background(), key)
	if names := namesOf(m.spans()); len(names) != 1 || names[0] != "redis.INCR" {
		t.Fatalf("spans %v, want only redis.INCR", names)
	}
	if n, err := testutil.GatherAndCount(reg, "commands_total"); err != nil || n != 2 {
		t.Fatalf("commands_total has %d series (%v), want GET and INCR: suppressed commands are still counted", n, err)
	}
}

// Spans that are not recorded build no attributes; the span is still ended.
func TestCommandSpans_UnsampledBuildNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	m := newMemoryWith(t, sdktrace.NeverSample(), nil)
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()}, Instrumentation(m, SpanConfig{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Ping(context.Background())
	if n := len(m.spans()); n != 0 {
		t.Fatalf("%d spans exported with a sampler that drops everything", n)
	}
}

// A command under a local span that its sampler dropped starts no span:
// the sampler would drop that one too. It does start one where that is not
// known: the hook of an application's own provider, a remote parent, a
// span recorded to keep its errors, or no parent at all.
func TestCommandSpans_NoneStartedUnderADroppedSpan(t *testing.T) {
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))).Tracer("t")
	dropped, _ := tracer.Start(context.Background(), "POST")
	kept, _ := sdktrace.NewTracerProvider(sdktrace.WithSampler(recordAll{sdktrace.NeverSample()})).Tracer("t").Start(context.Background(), "POST")
	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.SpanContextFromContext(dropped))
	for _, c := range []struct {
		name          string
		ctx           context.Context
		dropsChildren bool
		want          bool
	}{
		{"dropped parent", dropped, true, false},
		{"own provider", dropped, false, true},
		{"remote parent", remote, true, true},
		{"recorded parent", kept, true, true},
		{"no parent", context.Background(), true, true},
	} {
		h := &commandHook{tracer: tracer, dropsChildren: c.dropsChildren}
		if got := h.traced(c.ctx, "get"); got != c.want {
			t.Errorf("%s: traced = %v", c.name, got)
		}
	}
	for sampler, want := range map[string]bool{"": true, "parentbased_traceidratio": true, "always_off": true, "always_on": false, "traceidratio": false} {
		t.Setenv(envSampler, sampler)
		var s settings
		if err := s.readSampler(context.Background()); err != nil || s.dropsChildren != want {
			t.Errorf("%q: dropsChildren = %v (%v)", sampler, s.dropsChildren, err)
		}
	}
	t.Setenv(envSampler, "")
	s := settings{Config: Config{Sampling: SamplingConfig{KeepErrors: true}}}
	if err := s.readSampler(context.Background()); err != nil || s.dropsChildren {
		t.Errorf("KeepErrors: dropsChildren = %v (%v)", s.dropsChildren, err)
	}
}

// Every node of a Cluster client has its own hook: a span names the master
// that served it, so spans of keys on different masters carry different
// server.port values. The client's own slot-map loads start no trace.
func TestCommandSpans_ClusterSpansNameTheNodeThatServed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	m := newMemory(t)
	c, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()}, Instrumentation(m, SpanConfig{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc, ok := c.Unwrap().(*redis.ClusterClient)
	if !ok {
		t.Fatalf("%T is not a cluster client", c.Unwrap())
	}
	ctx := context.Background()
	want := map[string]int64{} // key → port of the master that owns it
	for i := 0; len(distinct(want)) < 3 && i < 200; i++ {
		key := "k" + strconv.Itoa(i)
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want[key] = portOf(t, node.Options().Addr)
	}
	if len(distinct(want)) < 3 {
		t.Fatalf("200 keys did not cover the 3 masters: %v", want)
	}
	m.exp.Reset() // spans of the set-up (MasterForKey loads the slot map)
	ctx, parent := m.Tracer("t").Start(ctx, "request")
	ports := map[int64]bool{}
	for key, port := range want {
		if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		sets := m.named("redis.SET")
		a := attrsOf(sets[len(sets)-1])
		if a["server.port"].AsInt64() != port || a["server.address"].AsString() != "127.0.0.1" {
			t.Fatalf("SET %s: span names %s:%d, but the master on port %d served it", key, a["server.address"].AsString(), a["server.port"].AsInt64(), port)
		}
		ports[port] = true
	}
	parent.End()
	if len(ports) != 3 {
		t.Fatalf("spans name %d masters, want 3", len(ports))
	}
	for _, s := range m.spans() {
		if !s.Parent.IsValid() && s.Name != "request" {
			t.Fatalf("root span %q: the cluster client's own work started a trace", s.Name)
		}
	}
}

func distinct(m map[string]int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, p := range m {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
