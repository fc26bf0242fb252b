package tracingfx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redisfx/redisfx"
)

// A bad value of a standard variable fails like a bad Config field: a
// *redisfx.ConfigError naming the variable, with the text a user sees.
func TestEnv_BadValuesFailNamingTheVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{envSDKDisabled: "yes"}, `tracingfx: invalid OTEL_SDK_DISABLED: "yes" is not true or false`},
		{map[string]string{envResourceAttrs: "team"}, `tracingfx: invalid OTEL_RESOURCE_ATTRIBUTES: entry 1 is not key=value (write key1=value1,key2=value2; the values are not shown: they may be sensitive)`},
		{map[string]string{envResourceAttrs: "a=b,=c"}, `tracingfx: invalid OTEL_RESOURCE_ATTRIBUTES: entry 2 is not key=value (write key1=value1,key2=value2; the values are not shown: they may be sensitive)`},
		{map[string]string{envResourceAttrs: "env=prod,team=pay%zzments"}, `tracingfx: invalid OTEL_RESOURCE_ATTRIBUTES: the value of "team" is not URL-encoded correctly (write %20 for a space, %25 for %; the value is not shown: it may be sensitive)`},
		{map[string]string{envResourceAttrs: "env=prod,team=caf%E9"}, `tracingfx: invalid OTEL_RESOURCE_ATTRIBUTES: entry 2 is not valid UTF-8 once decoded (OTLP carries only UTF-8; write other characters in UTF-8, URL-encoded; the entry is not shown: it may be sensitive)`},
		{map[string]string{envServiceName: "caf\xe9"}, `tracingfx: invalid OTEL_SERVICE_NAME: is not valid UTF-8 (OTLP carries only UTF-8)`},
		{map[string]string{envTracesExporter: "kafka"}, `tracingfx: invalid OTEL_TRACES_EXPORTER: "kafka" is not otlp, console or none`},
		{map[string]string{envTracesExporter: "otlp,console"}, `tracingfx: invalid OTEL_TRACES_EXPORTER: "otlp,console" names several exporters; tracingfx sends to one: otlp, console or none`},
		{map[string]string{envTracesExporter: "zipkin"}, `tracingfx: invalid OTEL_TRACES_EXPORTER: "zipkin" is that backend's own protocol, which tracingfx does not send: use otlp (Jaeger and Zipkin-compatible backends accept OTLP), or Config.Exporter.Type "zipkin"`},
		{map[string]string{envProtocol: "thrift"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_PROTOCOL: "thrift" is not http/protobuf or grpc`},
		{map[string]string{envTracesProtocol: "http/json"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json" is not supported by the OpenTelemetry Go exporter: use http/protobuf or grpc`},
		{map[string]string{envEndpoint: "collector:4318"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" is not an http(s) URL (write http://collector:4318)`},
		{map[string]string{envTracesEndpoint: "ftp://collector/traces"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "ftp://collector/traces" is not an http(s) URL`},
		{map[string]string{envEndpoint: "http://user:pa55w0rd@collector:4318"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_ENDPOINT: "http://user:xxxxx@collector:4318" holds credentials, which the OTLP exporter does not send: put them in OTEL_EXPORTER_OTLP_HEADERS (Authorization=Basic%20<base64 of user:password>) or Config.Exporter.Headers`},
		{map[string]string{envEndpoint: "http://collector:99999"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:99999" has port 99999, which is not between 1 and 65535`},
		{map[string]string{envTracesEndpoint: "http://collector:0/v1/traces"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://collector:0/v1/traces" has port 0, which is not between 1 and 65535`},
		{map[string]string{envLogsEndpoint: "https://collector:70000/v1/logs"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: "https://collector:70000/v1/logs" has port 70000, which is not between 1 and 65535`},
		{map[string]string{envLogsEndpoint: "collector"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: "collector" is not an http(s) URL (write http://collector)`},
		{map[string]string{envHeaders: "authorization=Bearer abc,tenant"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value with a valid header name (the values are not shown: they may be credentials)`},
		{map[string]string{envHeaders: "x-api(key)=abc"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_HEADERS: entry 1 is not key=value with a valid header name (the values are not shown: they may be credentials)`},
		{map[string]string{envTracesHeaders: "x-api-key=abc%0D%0Adef"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TRACES_HEADERS: the value of "x-api-key" holds a control character such as a line break once decoded (the value is not shown: it may be a credential)`},
		{map[string]string{envTracesHeaders: "api-key=%zz"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TRACES_HEADERS: the value of "api-key" is not URL-encoded correctly`},
		{map[string]string{envSampler: "sometimes"}, `tracingfx: invalid OTEL_TRACES_SAMPLER: "sometimes" is not always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio`},
		{map[string]string{envSampler: "jaeger_remote"}, `tracingfx: invalid OTEL_TRACES_SAMPLER: "jaeger_remote" needs a remote sampling service, which tracingfx does not support`},
		{map[string]string{envSampler: "traceidratio", envSamplerArg: "5%"}, `tracingfx: invalid OTEL_TRACES_SAMPLER_ARG: "5%" is not a number between 0 and 1 (the ratio of OTEL_TRACES_SAMPLER=traceidratio)`},
		{map[string]string{envSampler: "parentbased_traceidratio", envSamplerArg: "NaN"}, `tracingfx: invalid OTEL_TRACES_SAMPLER_ARG: "NaN" is not a number between 0 and 1 (the ratio of OTEL_TRACES_SAMPLER=parentbased_traceidratio)`},
		{map[string]string{envSamplerArg: "sometimes"}, `tracingfx: invalid OTEL_TRACES_SAMPLER_ARG: "sometimes" is not a number between 0 and 1`},
		{map[string]string{envSamplerArg: "5"}, `tracingfx: invalid OTEL_TRACES_SAMPLER_ARG: "5" is not a number between 0 and 1`},
		{map[string]string{envSampler: "always_on", envSamplerArg: "-0.5"}, `tracingfx: invalid OTEL_TRACES_SAMPLER_ARG: "-0.5" is not a number between 0 and 1`},
		{map[string]string{envSampler: "sometimes", envSamplerArg: "5"}, `tracingfx: invalid OTEL_TRACES_SAMPLER: "sometimes" is not always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio`},
		{map[string]string{envPropagators: "tracecontext, zipkin"}, `tracingfx: invalid OTEL_PROPAGATORS: "tracecontext, zipkin": unknown propagator: zipkin (known: tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace or none)`},
		{map[string]string{envBSPMaxQueueSize: "0"}, `tracingfx: invalid OTEL_BSP_MAX_QUEUE_SIZE: "0" is not a whole number above 0`},
		{map[string]string{envBSPMaxExportBatch: "lots"}, `tracingfx: invalid OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "lots" is not a whole number above 0`},
		{map[string]string{envBSPScheduleDelay: "5s"}, `tracingfx: invalid OTEL_BSP_SCHEDULE_DELAY: "5s" is not a whole number above 0`},
		{map[string]string{envBSPExportTimeout: "-1"}, `tracingfx: invalid OTEL_BSP_EXPORT_TIMEOUT: "-1" is not a whole number above 0`},
		// More milliseconds than a Duration holds wrapped to a negative
		// delay: the idle batch processor spun a core.
		{map[string]string{envBSPScheduleDelay: "10000000000000"}, `tracingfx: invalid OTEL_BSP_SCHEDULE_DELAY: 10000000000000 milliseconds is more than a duration holds (at most 9223372036854, about 292 years)`},
		{map[string]string{envBSPExportTimeout: "9223372036855"}, `tracingfx: invalid OTEL_BSP_EXPORT_TIMEOUT: 9223372036855 milliseconds is more than a duration holds (at most 9223372036854, about 292 years)`},
		// The exporters read their own timeouts: 0, negative or wrapping
		// turned their bound off; one that did not parse was ignored.
		{map[string]string{envTimeout: "0"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TIMEOUT: "0" is not a whole number above 0`},
		{map[string]string{envTracesTimeout: "-5"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: "-5" is not a whole number above 0`},
		{map[string]string{envTracesTimeout: "10s"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: "10s" is not a whole number above 0`},
		{map[string]string{envLogsTimeout: "99999999999999"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_LOGS_TIMEOUT: 99999999999999 milliseconds is more than a duration holds (at most 9223372036854, about 292 years)`},
		{map[string]string{envTimeout: " 5000"}, `tracingfx: invalid OTEL_EXPORTER_OTLP_TIMEOUT: " 5000" has spaces around it, which the exporter does not read`},
		{map[string]string{envBSPMaxQueueSize: "100", envBSPMaxExportBatch: "512"}, `tracingfx: invalid Config.Batch.MaxExportBatchSize: 512 is larger than Batch.MaxQueueSize 100 (with OTEL_BSP_MAX_EXPORT_BATCH_SIZE and OTEL_BSP_MAX_QUEUE_SIZE applied)`},
		{map[string]string{envLogsExporter: "console"}, `tracingfx: invalid OTEL_LOGS_EXPORTER: "console" is not otlp or none (the log bridge sends OTLP; the app's own logger already writes the console)`},
	}
	for _, c := range cases {
		p, err := newProvider(context.Background(), Config{}, mapEnv(c.env))
		if err == nil {
			_ = p.Shutdown(context.Background())
			t.Errorf("%v: no error", c.env)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("%v:\ngot  %s\nwant %s", c.env, err, c.want)
		}
	}
}

// OTEL_RESOURCE_ATTRIBUTES in the process environment: a value that is not
// URL-encoded correctly fails start-up (OpenTelemetry's own resource would
// print "invalid URL escape" and export the raw text), without repeating
// the value.
func TestEnv_BadResourceAttributes(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "token=s3cr%zzet")
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterConsole}})
	if err == nil {
		_ = p.Shutdown(context.Background())
		t.Fatal("a bad URL escape in OTEL_RESOURCE_ATTRIBUTES was accepted")
	}
	var cerr *redisfx.ConfigError
	if !errors.As(err, &cerr) || cerr.Field != "OTEL_RESOURCE_ATTRIBUTES" {
		t.Fatalf("%v (%T), want a *redisfx.ConfigError naming OTEL_RESOURCE_ATTRIBUTES", err, err)
	}
	if strings.Contains(err.Error(), "s3cr") {
		t.Fatalf("the value was repeated: %v", err)
	}
}

// ServiceName over OTEL_SERVICE_NAME and over service.name of
// OTEL_RESOURCE_ATTRIBUTES, and a header of Exporter.Headers over the same
// header of a variable: Config wins, and a warning names each variable it
// overrides (and the header, never a value).
func TestEnv_ConfigOverridesWarnForServiceNameAndHeaders(t *testing.T) {
	t.Parallel()
	s := resolved(t, Config{ServiceName: "from-config", Exporter: ExporterConfig{Type: ExporterOTLP,
		Headers: map[string]string{"authorization": "Bearer cfg-token", "X-Tenant": "a"}}},
		map[string]string{
			envServiceName:   "from-env",
			envResourceAttrs: "service.name=from-attrs,deployment.environment=prod",
			envHeaders:       "Authorization=Bearer%20env-token,x-other=1",
			envTracesHeaders: "x-tenant=b",
		})
	want := []string{
		"OTEL_SERVICE_NAME is set but Config.ServiceName wins (an explicit Config field overrides its variable)",
		"OTEL_RESOURCE_ATTRIBUTES sets service.name but Config.ServiceName wins (an explicit Config field overrides its variable)",
		"OTEL_EXPORTER_OTLP_HEADERS sets Authorization but Config.Exporter.Headers wins (an explicit Config field overrides its variable)",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS sets X-Tenant but Config.Exporter.Headers wins (an explicit Config field overrides its variable)",
	}
	if strings.Join(s.warnings, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings\n%s\nwant\n%s", strings.Join(s.warnings, "\n"), strings.Join(want, "\n"))
	}
	if s.headers["Authorization"] != "Bearer cfg-token" || s.headers["X-Tenant"] != "a" || s.headers["X-Other"] != "1" {
		t.Fatalf("headers %v", s.headers)
	}
	res := attribute.NewSet(s.resource...)
	if v, _ := res.Value(semconv.ServiceNameKey); v.AsString() != "from-config" {
		t.Fatalf("service.name %q", v.AsString())
	}
	if v, _ := res.Value("deployment.environment"); v.AsString() != "prod" {
		t.Fatalf("deployment.environment %q", v.AsString())
	}
	// Without the Config field there is nothing to warn about, and
	// OTEL_SERVICE_NAME wins over service.name of the attributes.
	s = resolved(t, Config{}, map[string]string{envServiceName: "from-env", envResourceAttrs: "service.name=from-attrs"})
	if len(s.warnings) != 0 {
		t.Fatalf("warnings %q", s.warnings)
	}
	res = attribute.NewSet(s.resource...)
	if v, _ := res.Value(semconv.ServiceNameKey); v.AsString() != "from-env" {
		t.Fatalf("service.name %q, want from-env", v.AsString())
	}
}

// resolved is the settings of cfg and env, failing t on an error.
func resolved(t *testing.T, cfg Config, env map[string]string) settings {
	t.Helper()
	s, err := resolve(cfg, mapEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The exporter: Config.Exporter.Type, else OTEL_TRACES_EXPORTER, else otlp
// when an endpoint is configured, else none.
func TestEnv_Exporter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  Config
		env  map[string]string
		want string
	}{
		{"nothing set", Config{}, nil, ExporterNone},
		{"OTEL_TRACES_EXPORTER", Config{}, map[string]string{envTracesExporter: "console"}, ExporterConsole},
		{"an endpoint variable alone", Config{}, map[string]string{envEndpoint: "http://c:4318"}, ExporterOTLP},
		{"a traces endpoint variable alone", Config{}, map[string]string{envTracesEndpoint: "http://c:4318/v1/traces"}, ExporterOTLP},
		{"Config.Exporter.Endpoint alone", Config{Exporter: ExporterConfig{Endpoint: "http://c:4318"}}, nil, ExporterOTLP},
		{"none wins over an endpoint", Config{}, map[string]string{envTracesExporter: "none", envEndpoint: "http://c:4318"}, ExporterNone},
		{"Config wins", Config{Exporter: ExporterConfig{Type: ExporterJaeger}}, map[string]string{envTracesExporter: "console"}, ExporterJaeger},
	} {
		if got := resolved(t, c.cfg, c.env).Exporter.Type; got != c.want {
			t.Errorf("%s: exporter %q, want %q", c.name, got, c.want)
		}
	}
	s := resolved(t, Config{Exporter: ExporterConfig{Type: ExporterJaeger}}, map[string]string{envTracesExporter: "console"})
	want := "OTEL_TRACES_EXPORTER is set but Config.Exporter.Type wins (an explicit Config field overrides its variable)"
	if len(s.warnings) != 1 || s.warnings[0] != want {
		t.Fatalf("warnings %q, want %q", s.warnings, want)
	}
}

// The endpoint by OpenTelemetry's rules, and the log bridge's beside it.
func TestEnv_Endpoints(t *testing.T) {
	t.Parallel()
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
		{"traces-only without a path: the root", Config{}, map[string]string{envTracesEndpoint: "http://c:4318"},
			"http://c:4318/", "", envTracesEndpoint},
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
		s := resolved(t, c.cfg, c.env)
		if s.traces.url != c.traces || s.logs.url != c.logs || s.traces.source != c.from {
			t.Errorf("%s: traces %q logs %q from %q; want %q %q from %q", c.name, s.traces.url, s.logs.url, s.traces.source, c.traces, c.logs, c.from)
		}
	}
}

// OTEL_EXPORTER_OTLP_ENDPOINT ending in /v1/traces posts to
// /v1/traces/v1/traces (OpenTelemetry's rule): a warning says so and how
// to fix it.
func TestEnv_GenericEndpointEndingInTracesPathWarns(t *testing.T) {
	t.Parallel()
	s := resolved(t, Config{}, map[string]string{envEndpoint: "http://jaeger:4318/v1/traces"})
	want := "OTEL_EXPORTER_OTLP_ENDPOINT ends in /v1/traces, and OpenTelemetry appends /v1/traces to it, so spans go to " +
		"http://jaeger:4318/v1/traces/v1/traces, which a Collector answers with 404: set it to the base address (http://jaeger:4318) " +
		"or set OTEL_EXPORTER_OTLP_TRACES_ENDPOINT instead"
	if s.traces.url != "http://jaeger:4318/v1/traces/v1/traces" || len(s.warnings) != 1 || s.warnings[0] != want {
		t.Fatalf("endpoint %q, warnings %q", s.traces.url, s.warnings)
	}
}

// Headers: the generic variable, then the traces one, then Config; the
// later wins for the same header, whatever the case of its name (before,
// "Authorization" from the variable and "authorization" from Config were
// both sent, in map order). Values are URL-decoded.
func TestEnv_Headers(t *testing.T) {
	t.Parallel()
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
			t.Errorf("%s = %q, want %q", k, s.headers[k], v)
		}
	}
}

func TestEnv_Batch(t *testing.T) {
	t.Parallel()
	env := map[string]string{envBSPMaxQueueSize: "4096", envBSPMaxExportBatch: "256", envBSPScheduleDelay: "250", envBSPExportTimeout: "10000"}
	s := resolved(t, Config{}, env)
	if want := (BatchConfig{4096, 256, 250 * time.Millisecond, 10 * time.Second}); s.Batch != want {
		t.Fatalf("batch %+v, want %+v", s.Batch, want)
	}
	s = resolved(t, Config{Batch: BatchConfig{MaxQueueSize: 1000, ScheduleDelay: time.Second}}, env)
	if want := (BatchConfig{1000, 256, time.Second, 10 * time.Second}); s.Batch != want {
		t.Fatalf("with Config: batch %+v, want %+v (Config wins field by field)", s.Batch, want)
	}
}

func TestEnv_Propagators(t *testing.T) {
	t.Parallel()
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

// OTEL_SDK_DISABLED=true makes no spans at all, whatever the Config says;
// the incoming trace context still passes through.
func TestEnv_SDKDisabled(t *testing.T) {
	t.Parallel()
	p, err := newProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP}}, mapEnv(map[string]string{envSDKDisabled: "TRUE"}))
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
	t.Parallel()
	rc := newReceiver(t)
	p, err := newProvider(context.Background(), Config{Exporter: ExporterConfig{Endpoint: rc.URL}}, mapEnv(map[string]string{envLogsExporter: "none"}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	if p.LoggerProvider() != nil {
		t.Fatal("OTEL_LOGS_EXPORTER=none, but the log bridge has an exporter")
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
	t.Parallel()
	rc := newGRPCReceiver(t)
	p, err := newProvider(context.Background(), Config{}, mapEnv(map[string]string{
		envProtocol: "grpc", envEndpoint: "http://" + rc.addr, envHeaders: "authorization=Bearer%20t"}))
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
	t.Parallel()
	rc := newReceiver(t)
	p, err := newProvider(context.Background(), Config{}, mapEnv(map[string]string{envTracesEndpoint: rc.URL + "/custom"}))
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
	p, err = newProvider(context.Background(), Config{Exporter: ExporterConfig{Writer: buf}}, mapEnv(map[string]string{envTracesExporter: "console"}))
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

// Found by an adversary: an endpoint that failed to parse (a % in the
// password, a typo in the port) or had no scheme was printed as given, so
// its password reached the start-up error; and a query string, which the
// OTLP exporters drop, was accepted (and logged, API key and all). Every
// form below fails start-up naming the variable or field, and neither the
// password nor the query's value appears in the error.
func TestEndpoint_SecretsNeverPrinted_QueryRefused(t *testing.T) {
	t.Parallel()
	const password, apiKey = "hunter2", "acme-secret"
	endpoints := map[string]string{
		"bad escape":             "http://user:" + password + "%zz@collector:4318",
		"port typo":              "http://user:" + password + "@collector:43x18",
		"no scheme":              "user:" + password + "@collector:4318",
		"slash in password":      "http://user:" + password + "/x@collector:4318",
		"hash in password":       "http://user:pa#" + password + "@collector:4318",
		"query":                  "http://collector:4318/v1/traces?key=" + apiKey,
		"query with a password":  "http://user:" + password + "@collector:4318?key=" + apiKey,
		"fragment":               "http://collector:4318/v1/traces#" + apiKey,
		"empty query":            "http://collector:4318/v1/traces?",
		"query of a bad address": "collector:4318?key=" + apiKey,
		// found attacking the fix: a :// after the scheme's place was taken
		// for the scheme's end, and a token as the user name was shown
		"scheme in the password":    "user:pa://" + password + "@collector:4318",
		"scheme in the query":       "user:" + password + "@collector:4318/v1/traces?next=http://x",
		"scheme typo":               "http//user:" + password + "@collector:4318/?r=https://x",
		"token as user":             "http://" + password + "@collector:4318",
		"token as user, no scheme":  password + "@collector:4318",
		"token with a bad port":     "http://" + password + "@collector:43x18",
		"percent-encoded @ in user": "http://us%40er:" + password + "@collector:4318",
	}
	for name, endpoint := range endpoints {
		for _, source := range []string{envEndpoint, envTracesEndpoint, "Config.Exporter.Endpoint"} {
			cfg, env := Config{}, map[string]string{}
			if source == "Config.Exporter.Endpoint" {
				cfg.Exporter.Endpoint = endpoint
			} else {
				env[source] = endpoint
			}
			p, err := newProvider(context.Background(), cfg, mapEnv(env))
			if err == nil {
				_ = p.Shutdown(context.Background())
				t.Errorf("%s in %s: accepted", name, source)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, "invalid "+source+":") {
				t.Errorf("%s in %s: %q does not name it", name, source, msg)
			}
			if strings.Contains(msg, password) || strings.Contains(msg, apiKey) {
				t.Errorf("%s in %s: the secret is printed: %s", name, source, msg)
			}
		}
	}
	if _, err := parseHTTPURL("http://collector:4318/v1/traces?tenant=acme"); err == nil || !strings.Contains(err.Error(), "query") {
		t.Errorf("a query: %v, want refused as a query", err)
	}
}

// OTEL_TRACES_SAMPLER_ARG is read only by a ratio sampler of
// OTEL_TRACES_SAMPLER. Set where nothing reads it (alone, beside another
// sampler, or under a Config.Sampling.Strategy), it is a warning in the
// app's log naming what wins; set to anything but a number in 0..1, it
// fails start-up whatever the sampler. Before, OTEL_TRACES_SAMPLER_ARG=0.01
// alone (meant as 1 %) kept every trace in silence, and 5 or "sometimes"
// passed start-up.
func TestEnv_SamplerArgWhereNothingReadsItWarns(t *testing.T) {
	const ignored = "tracing: OTEL_TRACES_SAMPLER_ARG is set but OTEL_TRACES_SAMPLER is %s, which takes no ratio, so the argument is ignored " +
		"(set OTEL_TRACES_SAMPLER=parentbased_traceidratio or traceidratio to sample by ratio)"
	cases := []struct {
		sampler string
		cfg     SamplingConfig
		want    string // the sampler of the start-up line
		warning string
	}{
		{"", SamplingConfig{}, "parentbased_always_on", fmt.Sprintf(ignored, "not set (so parentbased_always_on)")},
		{"always_on", SamplingConfig{}, "always_on", fmt.Sprintf(ignored, "always_on")},
		{"parentbased_always_off", SamplingConfig{}, "parentbased_always_off", fmt.Sprintf(ignored, "parentbased_always_off")},
		{"", SamplingConfig{Strategy: SampleParent, Ratio: 0.5}, "parent 0.5",
			"tracing: OTEL_TRACES_SAMPLER_ARG is set but Config.Sampling.Strategy wins (an explicit Config field overrides its variable)"},
		{"traceidratio", SamplingConfig{}, "traceidratio 0.01", ""},
		{"parentbased_traceidratio", SamplingConfig{}, "parentbased_traceidratio 0.01", ""},
	}
	for _, c := range cases {
		t.Setenv(envSampler, c.sampler)
		t.Setenv(envSamplerArg, "0.01")
		core, logs := observer.New(zap.InfoLevel)
		app := fxtest.New(t, fx.NopLogger, fx.Supply(zap.New(core)), fx.Supply(Config{Sampling: c.cfg}), Module)
		app.RequireStart()
		app.RequireStop()
		line := logs.FilterMessage("tracing configured").All()
		if len(line) != 1 || line[0].ContextMap()["sampler"] != c.want {
			t.Errorf("%s=%q, %+v: start-up line %v, want sampler %q", envSampler, c.sampler, c.cfg, line, c.want)
		}
		var warnings []string
		for _, e := range logs.FilterLevelExact(zap.WarnLevel).All() {
			warnings = append(warnings, e.Message)
		}
		if strings.Join(warnings, "\n") != c.warning {
			t.Errorf("%s=%q, %+v: warnings\n%s\nwant\n%s", envSampler, c.sampler, c.cfg, strings.Join(warnings, "\n"), c.warning)
		}
	}
	// A bad value fails start-up even where nothing reads it.
	t.Setenv(envSampler, "")
	t.Setenv(envSamplerArg, "1%")
	app := fx.New(fx.NopLogger, fx.Provide(zap.NewNop), fx.Supply(Config{Sampling: SamplingConfig{Strategy: SampleAlways}}), Module)
	want := `tracingfx: invalid OTEL_TRACES_SAMPLER_ARG: "1%" is not a number between 0 and 1`
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start-up error %v, want %s", err, want)
	}
}

// The exporters' timeout variables in range start: they are checked, not
// replaced (the exporters read them themselves).
func TestEnv_ExportTimeoutsInRangeAccepted(t *testing.T) {
	env := map[string]string{envTracesExporter: "none", envTimeout: "10000", envTracesTimeout: "1", envLogsTimeout: "9223372036854"}
	p, err := newProvider(context.Background(), Config{}, mapEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Shutdown(context.Background())
}
