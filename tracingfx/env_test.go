package tracingfx

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx"
)

// resolved is cfg with env set (for this test only) folded in.
func resolved(t *testing.T, cfg Config, env map[string]string) settings {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	s, err := resolve(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A bad value of a variable a user plausibly gets wrong fails start-up
// like a bad Config field: a *redisfx.ConfigError naming the variable,
// never showing a header's or an attribute's value.
func TestEnv_BadValuesFailNamingTheVariable(t *testing.T) {
	const secret = "S3CRET"
	for _, c := range []struct{ name, value, want string }{
		{envSDKDisabled, "yes", `"yes" is not true or false`},
		{envResourceAttrs, "team", "is not key=value"},
		{envTracesExporter, "kafka", `"kafka": unknown exporter`},
		{envTracesExporter, "otlp,console", `"otlp,console": unknown exporter`},
		{envLogsExporter, "kafka", `"kafka": unknown exporter`},
		{envProtocol, "thrift", `"thrift" is not http/protobuf or grpc`},
		{envTracesProtocol, "http/json", `"http/json" is not http/protobuf or grpc`},
		{envEndpoint, "collector:4318", "is not an http(s) URL with a host, such as http://collector:4318"},
		{envTracesEndpoint, "ftp://collector/traces", "is not an http(s) URL"},
		{envLogsEndpoint, "http://user:" + secret + "@c:4318", "holds credentials or a query"},
		{envEndpoint, "http://c:4318/?api_key=" + secret, "holds credentials or a query"},
		{envHeaders, "authorization=Bearer%20" + secret + ",tenant", "entry 2 is not key=value"},
		{envTracesHeaders, "x-api-key=" + secret + "%0D%0Adef", "entry 1 is not key=value"},
		{envLogsHeaders, "api-key=%zz", "entry 1 is not key=value"},
		{envSampler, "sometimes", `"sometimes" is not always_on, always_off, traceidratio`},
		{envSamplerArg, "5%", `"5%" is not a number between 0 and 1`},
		{envSamplerArg, "NaN", `"NaN" is not a number between 0 and 1`},
		{envPropagators, "tracecontext, zipkin", `"tracecontext, zipkin": `},
		{"OTEL_BSP_SCHEDULE_DELAY", "5s", `"5s" is not a whole number above 0`},
		{"OTEL_BSP_MAX_QUEUE_SIZE", "0", `"0" is not a whole number above 0`},
		{"OTEL_EXPORTER_OTLP_TIMEOUT", "10s", `"10s" is not a whole number above 0`},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			_, err := NewProvider(context.Background(), Config{})
			var ce *redisfx.ConfigError
			if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "tracingfx: invalid "+c.name+": ") ||
				!strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), secret) {
				t.Fatalf("got %v, want a ConfigError naming %s: %s, without the secret", err, c.name, c.want)
			}
		})
	}
}

// The exporter: Config.Exporter.Type, else OTEL_TRACES_EXPORTER (read by
// autoexport), else otlp when an endpoint is configured, else none.
func TestEnv_Exporter(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		env  map[string]string
		want string
	}{
		{"nothing set", Config{}, nil, ExporterNone},
		{"OTEL_TRACES_EXPORTER", Config{}, map[string]string{envTracesExporter: "console"}, ExporterConsole},
		{"OTEL_TRACES_EXPORTER=otlp", Config{}, map[string]string{envTracesExporter: "otlp", envProtocol: "grpc"}, ExporterOTLP},
		{"an endpoint variable alone", Config{}, map[string]string{envEndpoint: "http://c:4318"}, ExporterOTLP},
		{"a traces endpoint variable alone", Config{}, map[string]string{envTracesEndpoint: "http://c:4318/v1/traces"}, ExporterOTLP},
		{"Config.Exporter.Endpoint alone", Config{Exporter: ExporterConfig{Endpoint: "http://c:4318"}}, nil, ExporterOTLP},
		{"none wins over an endpoint", Config{}, map[string]string{envTracesExporter: "none", envEndpoint: "http://c:4318"}, ExporterNone},
		{"Config wins", Config{Exporter: ExporterConfig{Type: ExporterJaeger}}, map[string]string{envTracesExporter: "console"}, ExporterJaeger},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := resolved(t, c.cfg, c.env).Exporter.Type; got != c.want {
				t.Errorf("exporter %q, want %q", got, c.want)
			}
		})
	}
}

// The endpoint by OpenTelemetry's rules, and the log bridge's beside it.
func TestEnv_Endpoints(t *testing.T) {
	for _, c := range []struct {
		name               string
		cfg                Config
		env                map[string]string
		traces, logs, from string
	}{
		{"default is plain HTTP", Config{Exporter: ExporterConfig{Type: ExporterOTLP}}, nil,
			"http://localhost:4318/v1/traces", "http://localhost:4318/v1/logs", "default"},
		{"generic: /v1/traces appended", Config{}, map[string]string{envEndpoint: "http://c:4318"},
			"http://c:4318/v1/traces", "http://c:4318/v1/logs", envEndpoint},
		{"generic with a path: appended to it", Config{}, map[string]string{envEndpoint: "https://gw.example/otlp/"},
			"https://gw.example/otlp/v1/traces", "https://gw.example/otlp/v1/logs", envEndpoint},
		{"traces-only: as given", Config{}, map[string]string{envTracesEndpoint: "http://c:4318/custom", envEndpoint: "http://other:4318"},
			"http://c:4318/custom", "", envTracesEndpoint},
		{"logs-only", Config{}, map[string]string{envEndpoint: "http://c:4318", envLogsEndpoint: "http://logs:4318/v1/logs"},
			"http://c:4318/v1/traces", "http://logs:4318/v1/logs", envEndpoint},
		{"Config wins", Config{Exporter: ExporterConfig{Endpoint: "http://mine:4318"}}, map[string]string{envEndpoint: "http://c:4318"},
			"http://mine:4318/v1/traces", "http://mine:4318/v1/logs", "Config.Exporter.Endpoint"},
		{"gRPC default", Config{Exporter: ExporterConfig{Type: ExporterOTLP}}, map[string]string{envProtocol: "grpc"},
			"http://localhost:4317", "http://localhost:4317", "default"},
		{"gRPC: host and port only", Config{}, map[string]string{envProtocol: "grpc", envEndpoint: "https://c:4317/ignored"},
			"https://c:4317", "https://c:4317", envEndpoint},
		{"traces protocol wins over the generic one", Config{}, map[string]string{envProtocol: "grpc", envTracesProtocol: "http/protobuf", envEndpoint: "http://c:4318"},
			"http://c:4318/v1/traces", "http://c:4318/v1/logs", envEndpoint},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := resolved(t, c.cfg, c.env)
			if s.traces.url != c.traces || s.logs.url != c.logs || s.traces.source != c.from {
				t.Errorf("traces %q logs %q from %q; want %q %q from %q", s.traces.url, s.logs.url, s.traces.source, c.traces, c.logs, c.from)
			}
		})
	}
	if s := resolved(t, Config{}, map[string]string{envEndpoint: "http://jaeger:4318/v1/traces"}); len(s.warnings) != 1 {
		t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT ending in /v1/traces: warnings %q", s.warnings)
	}
}

// Headers: the generic variable, then the signal's, then Config; the later
// wins for the same header, whatever the case of its name.
func TestEnv_Headers(t *testing.T) {
	s := resolved(t, Config{Exporter: ExporterConfig{Headers: map[string]string{"x-tenant": "config", "authorization": "Bearer config"}}}, map[string]string{
		envHeaders:       "Authorization=Basic%20abc%3D,x-tenant=generic,x-scope=generic",
		envTracesHeaders: "X-SCOPE=traces",
	})
	want := map[string]string{"Authorization": "Bearer config", "X-Tenant": "config", "X-Scope": "traces"}
	if len(s.headers) != len(want) {
		t.Fatalf("headers %v, want %v", s.headers, want)
	}
	for k, v := range want {
		if s.headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, s.headers[k], v)
		}
	}
}

// OTEL_SDK_DISABLED=true makes no spans at all, whatever the Config says.
func TestEnv_SDKDisabled(t *testing.T) {
	t.Setenv(envSDKDisabled, "TRUE")
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	_, sp := p.TracerProvider().Tracer("t").Start(context.Background(), "x")
	if sp.IsRecording() || p.Tracer != nil || p.Endpoint() != "" {
		t.Fatalf("disabled: recording %v, SDK provider %v, endpoint %q", sp.IsRecording(), p.Tracer, p.Endpoint())
	}
}

func TestEnv_LogsExporterNone(t *testing.T) {
	rc := newReceiver(t)
	t.Setenv(envLogsExporter, "none")
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Endpoint: rc.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	if p.LoggerProvider() != nil {
		t.Fatal("OTEL_LOGS_EXPORTER=none, but the log bridge has an exporter")
	}
}

func TestEnv_Propagators(t *testing.T) {
	for _, c := range []struct {
		value string
		want  []string // headers injected
	}{
		{"", []string{"traceparent"}},
		{"b3", []string{"b3"}},
		{"b3multi, tracecontext", []string{"x-b3-traceid", "traceparent"}},
		{"none", nil},
	} {
		s := resolved(t, Config{}, map[string]string{envPropagators: c.value})
		m := newMemory(t)
		ctx, sp := m.Tracer("t").Start(context.Background(), "x")
		carrier := propagation.MapCarrier{}
		s.propagator.Inject(ctx, carrier)
		sp.End()
		if len(c.want) == 0 && len(carrier) != 0 {
			t.Errorf("OTEL_PROPAGATORS=%q injected %v", c.value, carrier)
		}
		for _, h := range c.want {
			if carrier.Get(h) == "" {
				t.Errorf("OTEL_PROPAGATORS=%q: no %s header in %v", c.value, h, carrier)
			}
		}
	}
}

// Setting OTEL_EXPORTER_OTLP_ENDPOINT alone exports, over plain HTTP, to
// /v1/traces, with the headers and resource of the environment; the log
// says where spans go.
func TestEnv_EndpointAloneExports(t *testing.T) {
	rc := newReceiver(t)
	t.Setenv(envEndpoint, rc.URL)
	t.Setenv(envHeaders, "x-api-key=k%201")
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	core, logs := observer.New(zap.InfoLevel)
	var svc ITracingService
	app := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(core)), Module,
		fx.Populate(fx.Annotate(&svc, fx.ParamTags(`name:"TRACING_SERVICE"`))))
	app.RequireStart()
	_ = svc.WithSpan(context.Background(), "charge", func(context.Context) error { return nil })
	app.RequireStop()
	if s := spanNamed(rc.got(), "charge"); s == nil {
		t.Fatalf("no span reached the backend; got %d", len(rc.got()))
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.paths[0] != "/v1/traces" || rc.headers[0].Get("X-Api-Key") != "k 1" || rc.service[0] != "from-env" ||
		rc.resource["deployment.environment.name"] != "test" {
		t.Fatalf("path %q, header %q, service %q, resource %v", rc.paths[0], rc.headers[0].Get("X-Api-Key"), rc.service[0], rc.resource)
	}
	line := logs.FilterMessage("tracing configured").All()
	if len(line) != 1 {
		t.Fatalf("no start-up line: %v", logs.All())
	}
	f := line[0].ContextMap()
	if f["exporter"] != "otlp" || f["endpoint"] != rc.URL+"/v1/traces" || f["endpoint_from"] != envEndpoint || f["protocol"] != "http/protobuf" {
		t.Fatalf("start-up line %v", f)
	}
	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, "k 1") {
				t.Fatal("a header value was logged")
			}
		}
	}
}

// The warning about OTEL_EXPORTER_OTLP_ENDPOINT reaches the app's log.
func TestEnv_WarningsAreLogged(t *testing.T) {
	t.Setenv(envEndpoint, "http://127.0.0.1:1/v1/traces")
	core, logs := observer.New(zap.InfoLevel)
	app := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(core)), Module)
	app.RequireStart()
	app.RequireStop()
	w := logs.FilterLevelExact(zap.WarnLevel).FilterMessageSnippet("OTEL_EXPORTER_OTLP_ENDPOINT ends in /v1/traces").All()
	if len(w) != 1 {
		t.Fatalf("warning not logged: %v", logs.All())
	}
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over gRPC, headers as metadata.
func TestEnv_GRPC(t *testing.T) {
	rc := newGRPCReceiver(t)
	t.Setenv(envProtocol, "grpc")
	t.Setenv(envEndpoint, "http://"+rc.addr)
	t.Setenv(envHeaders, "authorization=Bearer%20t")
	p, err := NewProvider(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := NewTracingService(p.TracerProvider()).StartSpan(context.Background(), "over-grpc")
	sp.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := rc.got(); len(s) != 1 || s[0].Name != "over-grpc" {
		t.Fatalf("gRPC receiver got %d spans", len(s))
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if got := rc.metadata[0].Get("authorization"); len(got) != 1 || got[0] != "Bearer t" {
		t.Fatalf("authorization metadata %v", got)
	}
}

// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as given, and
// OTEL_TRACES_EXPORTER=console writes the console format.
func TestEnv_TracesEndpointAndConsoleExport(t *testing.T) {
	rc := newReceiver(t)
	t.Setenv(envTracesEndpoint, rc.URL+"/custom")
	p, err := NewProvider(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := p.TracerProvider().Tracer("t").Start(context.Background(), "x")
	sp.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	paths := append([]string(nil), rc.paths...)
	rc.mu.Unlock()
	if len(paths) != 1 || paths[0] != "/custom" {
		t.Fatalf("posted to %v, want /custom", paths)
	}

	buf := &syncBuffer{}
	t.Setenv(envTracesExporter, "console")
	p, err = NewProvider(context.Background(), Config{Exporter: ExporterConfig{Writer: buf}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	_, sp = p.TracerProvider().Tracer("t").Start(context.Background(), "to-console")
	sp.End()
	if lines := buf.lines(t); len(lines) != 1 || lines[0].Name != "to-console" {
		t.Fatalf("console lines %v", lines)
	}
}
