package tracingfx

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/redisfx/redisfx"
)

// The OpenTelemetry variables tracingfx checks, so that a bad value fails
// start-up naming it (the SDK and the exporters log a line and carry on).
const (
	envSDKDisabled, envResourceAttrs, envPropagators = "OTEL_SDK_DISABLED", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_PROPAGATORS"
	envTracesExporter, envLogsExporter               = "OTEL_TRACES_EXPORTER", "OTEL_LOGS_EXPORTER"
	envProtocol, envTracesProtocol                   = "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envEndpoint, envTracesEndpoint, envLogsEndpoint  = "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
	envHeaders, envTracesHeaders, envLogsHeaders     = "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS"
	envSampler, envSamplerArg, envBSPMaxQueue        = "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_BSP_MAX_QUEUE_SIZE"
)

// positiveVars are read by the SDK's batch processor and the exporters:
// each must be a whole number above 0 (milliseconds for the durations).
var positiveVars = []string{envBSPMaxQueue, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY",
	"OTEL_BSP_EXPORT_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT"}

// configError names the Config field or variable that holds a bad value.
func configError(name, format string, args ...any) error {
	return redisfx.NewConfigError("tracingfx", name, fmt.Sprintf(format, args...))
}

// resolve validates cfg, then reads the environment for what it leaves
// unset: a Config field that is set wins over its variable.
func resolve(ctx context.Context, cfg Config) (settings, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return settings{}, err
	}
	s := settings{Config: cfg}
	for _, step := range []func(context.Context) error{s.readDisabled, s.readNumbers, s.readProtocol,
		s.readExporters, s.readEndpoints, s.readHeaders, s.readSampler, s.readPropagators} {
		if err := step(ctx); err != nil {
			return settings{}, err
		}
	}
	if s.resource, err = resource.New(ctx, resource.WithFromEnv()); err != nil {
		return settings{}, configError(envResourceAttrs, "is not key=value,… with URL-encoded values (values not shown: they may be sensitive)")
	}
	return s, nil
}

func (s *settings) readDisabled(context.Context) error {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(envSDKDisabled)))
	if s.disabled = v == "true"; v != "" && v != "true" && v != "false" {
		return configError(envSDKDisabled, "%q is not true or false", v)
	}
	return nil
}

func (s *settings) readNumbers(context.Context) error {
	for _, name := range positiveVars {
		if v := os.Getenv(name); v != "" {
			if n, err := strconv.Atoi(v); err != nil || n <= 0 {
				return configError(name, "%q is not a whole number above 0", v)
			}
		}
	}
	if s.Batch.MaxQueueSize == 0 {
		s.Batch.MaxQueueSize, _ = strconv.Atoi(os.Getenv(envBSPMaxQueue)) // the drop gate needs it
	}
	return nil
}

func (s *settings) readProtocol(context.Context) error {
	for _, name := range []string{envTracesProtocol, envProtocol} {
		if v := os.Getenv(name); v != "" && s.Exporter.Protocol == "" {
			if v != ProtocolHTTP && v != ProtocolGRPC {
				return configError(name, "%q is not %s or %s", v, ProtocolHTTP, ProtocolGRPC)
			}
			s.Exporter.Protocol = v
		}
	}
	s.Exporter.Protocol = cmp.Or(s.Exporter.Protocol, ProtocolHTTP)
	return nil
}

// readExporters lets autoexport read OTEL_TRACES_EXPORTER and
// OTEL_LOGS_EXPORTER. Its exporter is only looked at: tracingfx builds its
// own, on the transport Shutdown closes and with the console format of
// docs/tracing.md. Unset, spans go over OTLP when an endpoint is set.
func (s *settings) readExporters(ctx context.Context) error {
	if os.Getenv(envTracesExporter) != "" {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return configError(envTracesExporter, "%q: %v (tracingfx sends to one of otlp, console or none)", os.Getenv(envTracesExporter), err)
		}
		_ = exp.Shutdown(ctx) // it holds no connection yet
		kind := ExporterOTLP
		if _, console := exp.(*stdouttrace.Exporter); console {
			kind = ExporterConsole
		} else if autoexport.IsNoneSpanExporter(exp) {
			kind = ExporterNone
		}
		s.Exporter.Type = cmp.Or(s.Exporter.Type, kind)
	}
	if s.Exporter.Type == "" {
		s.Exporter.Type = ExporterNone
		if s.Exporter.Endpoint != "" || os.Getenv(envEndpoint) != "" || os.Getenv(envTracesEndpoint) != "" {
			s.Exporter.Type = ExporterOTLP
		}
	}
	s.exportLogs = true
	if v := os.Getenv(envLogsExporter); v != "" {
		logs, err := autoexport.NewLogExporter(ctx)
		if err != nil {
			return configError(envLogsExporter, "%q: %v (otlp or none)", v, err)
		}
		_ = logs.Shutdown(ctx)
		// console: the app's own logger already writes there.
		s.exportLogs = !autoexport.IsNoneLogExporter(logs) && v != ExporterConsole
	}
	return nil
}

// readEndpoints resolves the OTLP endpoints by OpenTelemetry's rules: the
// signal's own variable is used as given, the generic one is a base that
// gets /v1/traces or /v1/logs. gRPC uses the scheme, host and port.
func (s *settings) readEndpoints(context.Context) error {
	generic, tracesOnly, logsOnly := os.Getenv(envEndpoint), os.Getenv(envTracesEndpoint), os.Getenv(envLogsEndpoint)
	for name, v := range map[string]string{envEndpoint: generic, envTracesEndpoint: tracesOnly, envLogsEndpoint: logsOnly} {
		if err := checkURL(v); v != "" && err != nil {
			return configError(name, "%s", err)
		}
	}
	s.traces = endpoint{DefaultHTTPEndpoint, "default"}
	switch {
	case s.Exporter.Endpoint != "":
		s.traces = endpoint{tracesURL(s.Exporter.Endpoint), "Config.Exporter.Endpoint"}
	case tracesOnly != "":
		s.traces = endpoint{tracesOnly, envTracesEndpoint}
	case generic != "":
		s.traces = endpoint{joinPath(generic, tracesPath), envEndpoint}
		if strings.HasSuffix(strings.TrimSuffix(generic, "/"), tracesPath) {
			s.warnings = append(s.warnings, envEndpoint+" ends in "+tracesPath+", to which OpenTelemetry appends "+tracesPath+
				": set the base address, or "+envTracesEndpoint+" instead")
		}
	}
	s.logs = endpoint{logsURL(s.traces.url), s.traces.source}
	if logsOnly != "" {
		s.logs = endpoint{logsOnly, envLogsEndpoint}
	} else if s.traces.source == envEndpoint {
		s.logs.url = joinPath(generic, logsPath)
	}
	if s.Exporter.Protocol == ProtocolGRPC {
		s.traces.url, s.logs.url = hostOnly(s.traces.url), hostOnly(s.logs.url)
		if s.traces.source == "default" {
			s.traces.url, s.logs.url = DefaultGRPCEndpoint, DefaultGRPCEndpoint
		}
	}
	return nil
}

// readHeaders merges OTEL_EXPORTER_OTLP_HEADERS, then the signal's own
// variable, then Config.Exporter.Headers: a later one wins per header.
func (s *settings) readHeaders(context.Context) (err error) {
	if s.headers, err = mergeHeaders(s.Exporter.Headers, envHeaders, envTracesHeaders); err == nil {
		s.logHeaders, err = mergeHeaders(s.Exporter.Headers, envHeaders, envLogsHeaders)
	}
	return err
}

// mergeHeaders reads "key1=value1,key2=value2" (values URL-encoded) from
// each variable. Values are never shown: they may be credentials.
func mergeHeaders(cfg map[string]string, names ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range names {
		raw := strings.TrimSpace(os.Getenv(name))
		for i, entry := range strings.Split(raw, ",") {
			if raw == "" {
				break
			}
			k, v, ok := strings.Cut(entry, "=")
			k = strings.TrimSpace(k)
			value, err := url.PathUnescape(strings.TrimSpace(v))
			if !ok || !httpguts.ValidHeaderFieldName(k) || err != nil || !httpguts.ValidHeaderFieldValue(value) {
				return nil, configError(name, "entry %d is not key=value with a header name and a URL-encoded value without control characters", i+1)
			}
			out[http.CanonicalHeaderKey(k)] = value
		}
	}
	for k, v := range cfg {
		out[http.CanonicalHeaderKey(k)] = v
	}
	return out, nil
}

func (s *settings) readSampler(context.Context) error {
	ratio, arg := 1.0, os.Getenv(envSamplerArg)
	if f, err := strconv.ParseFloat(arg, 64); arg != "" && (err != nil || !(f >= 0 && f <= 1)) { // NaN too
		return configError(envSamplerArg, "%q is not a number between 0 and 1", arg)
	} else if arg != "" {
		ratio = f
	}
	name := os.Getenv(envSampler)
	if c := s.Sampling; c.Strategy != "" {
		name, ratio = configSamplers[c.Strategy], c.Ratio
		if c.Strategy == SampleParent && c.Ratio == 0 {
			name = "parentbased_always_on" // 0 means all
		}
	}
	samplers := map[string]sdktrace.Sampler{"": sdktrace.ParentBased(sdktrace.AlwaysSample()),
		"always_on": sdktrace.AlwaysSample(), "always_off": sdktrace.NeverSample(),
		"parentbased_always_on": sdktrace.ParentBased(sdktrace.AlwaysSample()), "parentbased_always_off": sdktrace.ParentBased(sdktrace.NeverSample()),
		"traceidratio": sdktrace.TraceIDRatioBased(ratio), "parentbased_traceidratio": sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))}
	if s.sampler = samplers[name]; s.sampler == nil {
		return configError(envSampler, "%q is not always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", os.Getenv(envSampler))
	}
	s.dropsChildren = !keeps(s.Sampling) && (name == "" || name == "always_off" || strings.HasPrefix(name, "parentbased_"))
	if keeps(s.Sampling) {
		s.sampler = recordAll{s.sampler}
	}
	return nil
}

func (s *settings) readPropagators(context.Context) error {
	s.propagator = Propagator()
	if raw := os.Getenv(envPropagators); strings.TrimSpace(raw) != "" {
		p, err := autoprop.TextMapPropagator(strings.FieldsFunc(raw, func(r rune) bool { return r == ',' || r == ' ' })...)
		if err != nil {
			return configError(envPropagators, "%q: %v", raw, err)
		}
		s.propagator = p
	}
	return nil
}
