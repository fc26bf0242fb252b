package tracingfx

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
)

// Forgetting the logger names what to provide (it used to be a
// "missing type: *zap.Logger" from an anonymous function).
func TestModule_MissingLoggerNamesWhatToProvide(t *testing.T) {
	t.Parallel()
	err := fx.New(fx.NopLogger, Module).Err()
	const want = "tracingfx.Module needs a *zap.Logger: provide one, e.g. fx.Provide(zap.NewProduction)"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("got  %v\nwant …%s", err, want)
	}
	if strings.Contains(err.Error(), "makeFuncStub") {
		t.Fatalf("the error still names an anonymous function: %v", err)
	}
}

// Injecting the tracing service without its name tag: Fx's own text, which
// names the type only (the name tag is in ITracingService's godoc and the
// README).
func TestModule_MissingNameTagIsFxsMissingType(t *testing.T) {
	t.Parallel()
	type unnamed struct {
		fx.In
		Tracer ITracingService
	}
	err := fx.New(fx.NopLogger, fx.Provide(zap.NewNop), Module, fx.Invoke(func(unnamed) {})).Err()
	const want = "missing type: tracingfx.ITracingService"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("got  %v\nwant …%s", err, want)
	}
}

// Every storefx client, named or not, gets command spans through the module.
func TestModule_NamedClientSpans(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	m := newMemory(t)
	type clients struct {
		fx.In
		Cache redis.UniversalClient `name:"cache"`
	}
	var got clients
	app := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop),
		Module, UseTracerProvider(func() *sdktrace.TracerProvider { return m.TracerProvider }),
		fx.Supply(storefx.Config{URL: srv.URL()}),
		storefx.Module, storefx.NamedClient("cache", storefx.Config{URL: srv.URL()}),
		fx.Populate(&got))
	app.RequireStart()
	got.Cache.Time(context.Background())
	app.RequireStop()
	if c := attrsOf(m.one(t, "redis.TIME"))[plugintrace.Client].AsString(); c != "cache" {
		t.Fatalf("redisfx.client = %q, want cache", c)
	}
}

// An app brings its own TracerProvider: the module's service, command spans
// and plugin tracer use it, and it is the app's trace.TracerProvider.
func TestModule_OwnTracerProvider(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	m := newMemory(t)
	type out struct {
		fx.In
		Service ITracingService      `name:"TRACING_SERVICE"`
		Plugin  trace.TracerProvider `name:"redisfx.plugin_tracer"`
		App     trace.TracerProvider
		Redis   redis.UniversalClient
	}
	var got out
	app := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop),
		fx.Supply(Config{PluginTracing: true}),
		Module, UseTracerProvider(func() (*sdktrace.TracerProvider, error) { return m.TracerProvider, nil }),
		fx.Supply(storefx.Config{URL: srv.URL()}), storefx.Module,
		fx.Populate(&got))
	app.RequireStart()
	ctx := context.Background()
	_ = got.Service.WithSpan(ctx, "custom", func(ctx context.Context) error {
		got.Redis.Ping(ctx)
		_, sp := plugintrace.Start(ctx, got.Plugin, "cache", "cache.get", "GET")
		sp.Finish(nil)
		return nil
	})
	app.RequireStop()
	custom := m.one(t, "custom")
	for _, name := range []string{"redis.PING", "cache.get"} {
		if s := m.one(t, name); s.Parent.SpanID() != custom.SpanContext.SpanID() {
			t.Errorf("%s is not a child of the custom span", name)
		}
	}
	if got.App != trace.TracerProvider(m.TracerProvider) {
		t.Fatalf("the app's trace.TracerProvider is %T, not its own", got.App)
	}
	if _, sp := m.Tracer("t").Start(ctx, "after-stop"); !sp.IsRecording() {
		t.Fatal("the module shut the application's own provider down")
	}
}

// A Config field that only tracingfx's own provider would use is an error
// with the application's provider, not silently ignored.
func TestModule_OwnTracerProviderWithExporterConfigFails(t *testing.T) {
	t.Parallel()
	err := fx.New(fx.NopLogger, fx.Provide(zap.NewNop),
		fx.Supply(&Config{Exporter: ExporterConfig{Type: ExporterOTLP}}),
		Module, UseTracerProvider(func() trace.TracerProvider { return noop.NewTracerProvider() }),
		fx.Invoke(func(trace.TracerProvider) {})).Err()
	const want = "tracingfx: invalid Config.Exporter.Type: is set, but the application brings its own TracerProvider (UseTracerProvider), which decides it: configure that provider instead"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("got  %v\nwant …%s", err, want)
	}
}

// The client's start-up check and the store_up probe at each scrape are
// not work: they start no trace.
func TestModule_ProbesStartNoTraces(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	m := newMemory(t)
	reg := prometheus.NewRegistry()
	app := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop),
		fx.Supply(fx.Annotate(reg, fx.As(new(prometheus.Registerer)))),
		Module, UseTracerProvider(func() *sdktrace.TracerProvider { return m.TracerProvider }),
		fx.Supply(storefx.Config{URL: srv.URL()}), storefx.Module, fx.Invoke(func(redis.UniversalClient) {}))
	app.RequireStart()
	if up := counterValue(t, reg, "store_up"); up != 1 { // each scrape pings every client
		t.Fatalf("store_up = %v: the probe did not run", up)
	}
	app.RequireStop()
	if names := namesOf(m.spans()); len(names) != 0 {
		t.Fatalf("probes made spans %v", names)
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if g := mf.Metric[0].GetGauge(); g != nil {
				return g.GetValue()
			}
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not exported", name)
	return 0
}

// SetGlobals makes the module's provider and propagator OpenTelemetry's
// globals at start; without it the globals are left alone. (Not parallel:
// the globals are the process's.)
func TestModule_SetGlobals(t *testing.T) {
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	start := func(opts ...fx.Option) *memory {
		m := newMemory(t)
		app := fxtest.New(t, append([]fx.Option{fx.NopLogger, fx.Provide(zap.NewNop), Module,
			UseTracerProvider(func() *sdktrace.TracerProvider { return m.TracerProvider })}, opts...)...)
		app.RequireStart()
		t.Cleanup(app.RequireStop)
		return m
	}
	plain := start()
	_, sp := otel.Tracer("lib").Start(context.Background(), "library-span")
	sp.End()
	if n := len(plain.spans()); n != 0 {
		t.Fatalf("without SetGlobals a library's span reached the app: %d", n)
	}
	m := start(SetGlobals)
	_, sp = otel.Tracer("lib").Start(context.Background(), "library-span")
	sp.End()
	m.one(t, "library-span")
	carrier := propagation.MapCarrier{}
	ctx, sp := otel.Tracer("lib").Start(context.Background(), "x")
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	sp.End()
	if carrier.Get("traceparent") == "" {
		t.Fatalf("the global propagator is not the module's: %v", carrier)
	}
}

// With the exporter none nothing can receive a span: command and plugin
// spans are not made (the command is still counted), and the application's
// own span records nothing but carries a trace id and the sampler's
// decision (for the logs, and for the traceparent sent downstream).
func TestModule_ExporterNoneMakesNoCommandSpans(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rec := tracetest.NewSpanRecorder()
	reg := prometheus.NewRegistry()
	type out struct {
		fx.In
		Provider *Provider
		Service  ITracingService      `name:"TRACING_SERVICE"`
		Plugin   trace.TracerProvider `name:"redisfx.plugin_tracer"`
		Redis    redis.UniversalClient
	}
	var got out
	app := fxtest.New(t, fx.NopLogger, fx.Provide(zap.NewNop), fx.Supply(Config{PluginTracing: true}),
		fx.Supply(fx.Annotate(reg, fx.As(new(prometheus.Registerer)))),
		Module, fx.Supply(storefx.Config{URL: srv.URL()}), storefx.Module, fx.Populate(&got))
	got.Provider.Tracer.RegisterSpanProcessor(rec) // the SDK provider is built, but spans skip it
	app.RequireStart()
	var app1 trace.SpanContext
	var recording bool
	carrier := propagation.MapCarrier{}
	_ = got.Service.WithSpan(context.Background(), "custom", func(ctx context.Context) error {
		app1, recording = trace.SpanContextFromContext(ctx), trace.SpanFromContext(ctx).IsRecording()
		got.Provider.Propagator().Inject(ctx, carrier)
		got.Redis.Incr(ctx, redistest.Prefix(t)+"n")
		_, sp := plugintrace.Start(ctx, got.Plugin, "cache", "cache.get", "GET")
		sp.Finish(nil)
		return nil
	})
	app.RequireStop()
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans recorded, want none", n)
	}
	if !app1.TraceID().IsValid() || !app1.SpanID().IsValid() || !app1.IsSampled() || recording {
		t.Fatalf("the application's span: %v sampled=%v recording=%v; want valid ids, sampled, not recording", app1.TraceID(), app1.IsSampled(), recording)
	}
	if want := "00-" + app1.TraceID().String() + "-" + app1.SpanID().String() + "-01"; carrier.Get("traceparent") != want {
		t.Fatalf("traceparent %q, want %q", carrier.Get("traceparent"), want)
	}
	if n := counted(t, reg, "commands_total", "INCR"); n != 1 {
		t.Fatalf("commands_total{command=INCR} = %v, want 1", n)
	}
}
