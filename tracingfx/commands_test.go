package tracingfx

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// tracedClient is a storefx client with command spans to a console buffer.
func tracedClient(t *testing.T, srv *redistest.Server, name string, spans SpanConfig, reg prometheus.Registerer) (*storefx.Client, *Provider, *syncBuffer) {
	t.Helper()
	p, buf := consoleProvider(t, Config{})
	m, err := NewCommandMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := storefx.New(name, storefx.Config{URL: srv.URL()}, Instrumentation(p.Tracer, spans, m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, p, buf
}

func TestCommandSpans_NestUnderParent_ArgsHiddenByDefault(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, p, buf := tracedClient(t, srv, "default", SpanConfig{}, nil)
	key := redistest.Prefix(t) + "user:42:card"
	ctx, parent := p.Tracer.Tracer("t").Start(context.Background(), "request")
	c.Set(ctx, key, "4242424242424242", time.Minute)
	parent.End()
	spans := buf.lines(t)
	set, req := consoleNamed(spans, "redis.SET"), consoleNamed(spans, "request")
	if set == nil || set.Kind != "CLIENT" || set.ParentSpanID != req.SpanID {
		t.Fatalf("SET span %+v not a CLIENT child of %s", set, req.SpanID)
	}
	a := set.Attributes
	if a["db.system"] != "redis" || a["db.system.name"] != "redis" || a["db.operation"] != "SET" || a["db.operation.name"] != "SET" ||
		a[AttrClient] != "default" || a["server.address"] != "127.0.0.1" || a["server.port"] == nil || a[AttrDurationMS] == nil {
		t.Fatalf("attributes %v", a)
	}
	if a["db.statement"] != "SET ? ? ? ?" {
		t.Fatalf("db.statement = %q, want values replaced", a["db.statement"])
	}
	for k, v := range a {
		if s, ok := v.(string); ok && (strings.Contains(s, "4242") || strings.Contains(s, "user:42")) {
			t.Fatalf("%s leaks a value: %q", k, s)
		}
	}
}

func TestCommandSpans_ArgsAndResultWhenEnabled_Truncated(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, _, buf := tracedClient(t, srv, "default", SpanConfig{IncludeArgs: true, IncludeResult: true, MaxArgLength: 12}, nil)
	key := redistest.Prefix(t) + "k"
	c.Set(context.Background(), key, strings.Repeat("v", 50), time.Minute)
	c.Get(context.Background(), key)
	get := consoleNamed(buf.lines(t), "redis.GET")
	if args := get.Attributes["db.statement.args"].(string); len(args) != 12 {
		t.Fatalf("args %q not cut at 12", args)
	}
	if res := get.Attributes["db.statement.result"].(string); res != strings.Repeat("v", 12) {
		t.Fatalf("result %q", res)
	}
}

func TestCommandSpans_ExcludedCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, _, buf := tracedClient(t, srv, "default", SpanConfig{ExcludeCommands: []string{"ping"}}, nil)
	c.Ping(context.Background())
	c.Time(context.Background())
	spans := buf.lines(t)
	if consoleNamed(spans, "redis.PING") != nil || consoleNamed(spans, "redis.TIME") == nil {
		t.Fatalf("spans %v", spans)
	}
}

func TestCommandSpans_ErrorsAndNil(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c, _, buf := tracedClient(t, srv, "default", SpanConfig{}, reg)
	ctx := context.Background()
	key := redistest.Prefix(t) + "k"
	if err := c.Get(ctx, key).Err(); err != redis.Nil {
		t.Fatal(err)
	}
	c.Set(ctx, key, "text", time.Minute)
	c.Incr(ctx, key) // WRONGTYPE-like: value is not an integer
	spans := buf.lines(t)
	get, incr := consoleNamed(spans, "redis.GET"), consoleNamed(spans, "redis.INCR")
	if get.Status.Code == "ERROR" || get.Attributes[AttrError] != nil {
		t.Fatal("redis.Nil marked as an error")
	}
	if incr.Status.Code != "ERROR" || incr.Attributes[AttrError] != true || len(incr.Events) == 0 || incr.Events[0].Name != "exception" {
		t.Fatalf("failed INCR: %+v", incr)
	}
	if n := testutil.ToFloat64(mustCounter(t, reg, "errors_total")); n != 1 {
		t.Fatalf("errors_total = %v", n)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
			c.Add(mf.Metric[0].Counter.GetValue())
			return c
		}
	}
	t.Fatalf("%s not registered", name)
	return nil
}

func TestCommandSpans_Pipeline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, _, buf := tracedClient(t, srv, "default", SpanConfig{}, nil)
	key := redistest.Prefix(t) + "k"
	_, _ = c.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		p.Set(context.Background(), key, "1", time.Minute)
		p.Incr(context.Background(), key)
		return nil
	})
	_, _ = c.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
		p.Incr(context.Background(), key)
		return nil
	})
	spans := buf.lines(t)
	pl, tx := consoleNamed(spans, "redis.PIPELINE"), consoleNamed(spans, "redis.MULTI")
	if pl == nil || pl.Attributes["db.operation.batch.size"] != float64(2) || pl.Attributes["db.statement"] != "SET ? ? ? ?\nINCR ?" {
		t.Fatalf("pipeline span %+v", pl)
	}
	if tx == nil {
		t.Fatalf("transaction span missing: %v", spans)
	}
}

// Handshake commands (HELLO, AUTH with the password, CLIENT SETNAME) make no spans.
func TestCommandSpans_HandshakeQuietAndCredentialsNeverTraced(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t, redistest.WithArgs("--requirepass", "s3cret-pw"))
	p, buf := consoleProvider(t, Config{})
	c, err := storefx.New("default", storefx.Config{URL: "redis://:s3cret-pw@" + srv.Addr(), ClientName: "payments"},
		Instrumentation(p.Tracer, SpanConfig{IncludeArgs: true}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Ping(context.Background())
	spans := buf.lines(t)
	if len(spans) != 1 || spans[0].Name != "redis.PING" {
		names := []string{}
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("spans %v, want only redis.PING", names)
	}
	raw := buf.b.String()
	if strings.Contains(raw, "s3cret-pw") {
		t.Fatal("the password reached a span")
	}
}

// Every storefx client, named or not, gets command spans through the module.
func TestModule_NamedClientSpans(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	buf := &syncBuffer{}
	type clients struct {
		fx.In
		Cache redis.UniversalClient `name:"cache"`
	}
	var got clients
	app := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop),
		fx.Supply(&Config{Exporter: ExporterConfig{Type: ExporterConsole, Writer: buf}}),
		fx.Supply(&storefx.Config{URL: srv.URL()}),
		Module, storefx.Module, storefx.NamedClient("cache", storefx.Config{URL: srv.URL()}),
		fx.Populate(&got))
	app.RequireStart()
	got.Cache.Time(context.Background())
	app.RequireStop()
	var named *ConsoleSpan
	for _, s := range buf.lines(t) {
		if s.Name == "redis.TIME" {
			named = &s
		}
	}
	if named == nil || named.Attributes[AttrClient] != "cache" {
		t.Fatalf("named client span %+v", named)
	}
}
