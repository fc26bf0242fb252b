package tracingfx

import (
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/fxconfig"
)

// Exporter types. Every type but Console and None sends OTLP; the label
// (otlp, jaeger, zipkin) is semantic only: Jaeger, Tempo and
// Zipkin-compatible backends all accept OTLP today.
const (
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
	ExporterJaeger  = "jaeger"
	ExporterZipkin  = "zipkin"
	ExporterNone    = "none"
)

// Sampling strategies.
const (
	SampleAlways = "always" // keep every trace
	SampleNever  = "never"  // keep none
	SampleRatio  = "ratio"  // keep Ratio of the traces, by trace id
	SampleParent = "parent" // follow the caller's decision; Ratio for new traces
)

// Config holds the tracing options. Zero fields take the defaults noted.
// Where a field is zero, the standard OpenTelemetry environment variable
// named beside it applies; a field that is set wins over its variable, and
// OTEL_SDK_DISABLED=true turns tracing off whatever the Config says.
// docs/configuration.md lists every variable with its default. Every
// duration is at most 100 years; a longer one is refused, naming it.
type Config struct {
	// ServiceName is the service.name of the resource. Default:
	// OTEL_SERVICE_NAME, else service.name of OTEL_RESOURCE_ATTRIBUTES, else
	// "unknown_service:<binary>" as OpenTelemetry does. Set, it wins over
	// both (with a warning at start for each that is set).
	ServiceName string
	// Exporter selects where spans go.
	Exporter ExporterConfig
	// PluginTracing enables the plugin spans (cache, lock, rate-limit,
	// stream and idempotency operations). Default off.
	PluginTracing bool
	// DisableRedisCommands turns the redis.<COMMAND> spans off. They are on
	// by default.
	DisableRedisCommands bool
	// Spans configures the command spans.
	Spans SpanConfig
	// Sampling configures which traces are kept.
	Sampling SamplingConfig
	// Batch configures the batch span processor of OTLP exporters.
	Batch BatchConfig
	// ShutdownTimeout bounds the final flush on stop, so a slow or dead
	// backend never hangs shutdown. Default 5s.
	ShutdownTimeout time.Duration
}

// ExporterConfig selects and addresses the exporter.
type ExporterConfig struct {
	// Type is ExporterOTLP, ExporterConsole, ExporterJaeger, ExporterZipkin or
	// ExporterNone. Default: OTEL_TRACES_EXPORTER, else ExporterOTLP when an
	// endpoint is configured (Endpoint, OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), else ExporterNone: nothing is
	// exported; the request's and the application's spans are made id-only
	// (trace and span ids and the sampler's decision, nothing recorded), so
	// trace ids reach the logs and propagate; Redis command and plugin spans
	// are not made.
	Type string
	// Protocol is ProtocolHTTP (OTLP/HTTP with protobuf) or ProtocolGRPC.
	// Default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
	// OTEL_EXPORTER_OTLP_PROTOCOL, else ProtocolHTTP.
	Protocol string
	// Endpoint is the OTLP address. Over HTTP, a base address such as
	// http://collector:4318 gets /v1/traces appended and a URL with a path
	// is used as given; over gRPC only the scheme (http: plain, https: TLS),
	// host and port count. Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as
	// given), else OTEL_EXPORTER_OTLP_ENDPOINT (with /v1/traces appended),
	// else DefaultHTTPEndpoint or DefaultGRPCEndpoint. It (and each of
	// those variables) must be an http(s) URL without a user or password,
	// with a port, if any, between 1 and 65535.
	Endpoint string
	// Headers are sent with every export: credentials for the backend (an
	// API key, a tenant, "authorization: Bearer <ACCESS_TOKEN>"). They are
	// added to OTEL_EXPORTER_OTLP_HEADERS and
	// OTEL_EXPORTER_OTLP_TRACES_HEADERS, and win for the same header. They
	// are never logged. A name must be an HTTP token and a value hold no
	// control character; over gRPC, a name holds only letters, digits, -, _
	// and . (it is sent in lower case), and a value only printable ASCII
	// unless the name ends in -bin. Anything else fails start-up: the
	// header could never be sent.
	Headers map[string]string
	// Writer receives the console exporter's lines. Default os.Stdout.
	Writer io.Writer
}

// SpanConfig configures the Redis command spans.
type SpanConfig struct {
	// IncludeArgs adds db.statement.args (the arguments, values included) and
	// puts the values into db.statement. Off by default: values may be
	// personal data or secrets.
	IncludeArgs bool
	// IncludeResult adds db.statement.result.
	IncludeResult bool
	// MaxArgLength cuts args and result to this many bytes. Default 256.
	MaxArgLength int
	// ExcludeCommands get no span (case-insensitive), e.g. "PING". They
	// are still measured in the command metrics (commands_total,
	// command_duration_seconds, errors_total). A pipeline or transaction
	// holding one still gets its redis.PIPELINE or redis.MULTI span.
	ExcludeCommands []string
}

// SamplingConfig configures the sampler.
type SamplingConfig struct {
	// Strategy: SampleAlways, SampleNever, SampleRatio or SampleParent.
	// Default: OTEL_TRACES_SAMPLER (with OTEL_TRACES_SAMPLER_ARG, read by
	// its ratio samplers only), else parent-based always-on. A set
	// OTEL_TRACES_SAMPLER_ARG that nothing reads is a warning at start; one
	// that is not a number between 0 and 1 fails start-up.
	Strategy string
	// Ratio is the fraction kept with SampleRatio and SampleParent (0.01 is 1 %).
	Ratio float64
	// KeepErrors exports spans that end with status ERROR even when their
	// trace was not sampled, so that a 1 % sample still shows every failure.
	KeepErrors bool
	// KeepSlowerThan exports spans that last longer than this even when
	// their trace was not sampled. 0 disables. With KeepErrors or
	// KeepSlowerThan every span is recorded, then dropped at its end if not
	// kept: see docs/performance.md for the measured cost.
	KeepSlowerThan time.Duration
}

// BatchConfig configures the batch span processor of the OTLP exporter.
// Zero fields take the OTEL_BSP_* variable, else OpenTelemetry's default.
type BatchConfig struct {
	// MaxQueueSize is how many ended spans wait for export (handed to the
	// batch processor, not yet given to the exporter); a span that ends
	// when that many wait is dropped, so a slow backend never slows the
	// app. Each drop is counted (Provider.DroppedSpans and, in an Fx app,
	// tracing_export_errors_total) and reported in a warning at most every
	// 10 s. Default OTEL_BSP_MAX_QUEUE_SIZE, else 2048.
	MaxQueueSize int
	// MaxExportBatchSize is the most spans in one export. Default
	// OTEL_BSP_MAX_EXPORT_BATCH_SIZE, else 512.
	MaxExportBatchSize int
	// ScheduleDelay is the longest a span waits before export. Default
	// OTEL_BSP_SCHEDULE_DELAY (milliseconds), else 5s.
	ScheduleDelay time.Duration
	// ExportTimeout bounds one export. Default OTEL_BSP_EXPORT_TIMEOUT
	// (milliseconds), else 30s.
	ExportTimeout time.Duration
}

func bad(opt, format string, args ...any) error {
	return redisfx.NewConfigError("tracingfx", "Config."+opt, fmt.Sprintf(format, args...))
}

// normalize validates c, one field after another in declaration order, and
// applies the defaults that do not depend on the environment.
func (c Config) normalize() (Config, error) {
	if !utf8.ValidString(c.ServiceName) {
		// OTLP carries only UTF-8: every export, each holding the
		// resource, would be refused (helper-75). The value is not shown.
		return c, bad("ServiceName", "is not valid UTF-8 (OTLP carries only UTF-8)")
	}
	c.Exporter.Type = strings.ToLower(c.Exporter.Type)
	switch c.Exporter.Type {
	case "", ExporterOTLP, ExporterConsole, ExporterJaeger, ExporterZipkin, ExporterNone:
	default:
		return c, bad("Exporter.Type", "%q is not otlp, console, jaeger, zipkin or none", c.Exporter.Type)
	}
	switch c.Exporter.Protocol {
	case "", ProtocolHTTP, ProtocolGRPC:
	default:
		return c, bad("Exporter.Protocol", "%q is not %s or %s", c.Exporter.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if c.Exporter.Endpoint != "" {
		if _, err := parseHTTPURL(c.Exporter.Endpoint); err != nil {
			return c, bad("Exporter.Endpoint", "%q %s", redactedURL(c.Exporter.Endpoint), err.Error())
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Exporter.Headers)) {
		if !httpguts.ValidHeaderFieldName(k) {
			return c, bad("Exporter.Headers", "%q is not a header name", k)
		}
		if !httpguts.ValidHeaderFieldValue(c.Exporter.Headers[k]) {
			// The value is not shown: it may be a credential.
			return c, bad("Exporter.Headers", "the value of %q holds a control character such as a line break", k)
		}
		if c.Exporter.Protocol == ProtocolGRPC {
			if problem := grpcHeaderProblem(k, c.Exporter.Headers[k], "Config.Exporter.Protocol"); problem != "" {
				return c, bad("Exporter.Headers", "%s", problem)
			}
		}
	}
	if !(c.Sampling.Ratio >= 0 && c.Sampling.Ratio <= 1) { // NaN too
		return c, bad("Sampling.Ratio", "%v is not between 0 and 1", c.Sampling.Ratio)
	}
	switch c.Sampling.Strategy {
	case "", SampleAlways, SampleNever:
		if c.Sampling.Ratio != 0 {
			// A ratio the strategy does not read is a mistake, not a setting.
			return c, bad("Sampling.Ratio", "%v is set, but only Strategy %q or %q reads it (Strategy is %q)",
				c.Sampling.Ratio, SampleRatio, SampleParent, c.Sampling.Strategy)
		}
	case SampleRatio, SampleParent:
	default:
		return c, bad("Sampling.Strategy", "%q is not always, never, ratio or parent", c.Sampling.Strategy)
	}
	if c.Sampling.KeepSlowerThan < 0 {
		return c, bad("Sampling.KeepSlowerThan", "%v is negative", c.Sampling.KeepSlowerThan)
	}
	if why := fxconfig.TooLong(c.Sampling.KeepSlowerThan); why != "" {
		return c, bad("Sampling.KeepSlowerThan", "%s", why)
	}
	if c.Spans.MaxArgLength < 0 {
		return c, bad("Spans.MaxArgLength", "%d is negative", c.Spans.MaxArgLength)
	} else if c.Spans.MaxArgLength == 0 {
		c.Spans.MaxArgLength = 256
	}
	counts := []struct {
		field string
		value int
	}{{"Batch.MaxQueueSize", c.Batch.MaxQueueSize}, {"Batch.MaxExportBatchSize", c.Batch.MaxExportBatchSize}}
	for _, v := range counts {
		if v.value < 0 {
			return c, bad(v.field, "%d is negative", v.value)
		}
	}
	if c.Batch.MaxExportBatchSize > 0 && c.Batch.MaxQueueSize > 0 && c.Batch.MaxExportBatchSize > c.Batch.MaxQueueSize {
		return c, bad("Batch.MaxExportBatchSize", "%d is larger than Batch.MaxQueueSize %d", c.Batch.MaxExportBatchSize, c.Batch.MaxQueueSize)
	}
	durations := []struct {
		field string
		value time.Duration
	}{{"Batch.ScheduleDelay", c.Batch.ScheduleDelay}, {"Batch.ExportTimeout", c.Batch.ExportTimeout}, {"ShutdownTimeout", c.ShutdownTimeout}}
	for _, v := range durations {
		if v.value < 0 {
			return c, bad(v.field, "%v is negative", v.value)
		}
		if why := fxconfig.TooLong(v.value); why != "" {
			return c, bad(v.field, "%s", why)
		}
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	return c, nil
}

// Validate reports the first invalid field, in declaration order. It does
// not read the environment: NewProvider reports a bad OTEL_* value.
func (c Config) Validate() error {
	_, err := c.normalize()
	return err
}

// tracesURL turns Config.Exporter.Endpoint into the URL of the traces
// resource: a base address gets /v1/traces, a URL with a path is kept.
func tracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return endpoint
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = tracesPath
	}
	return u.String()
}

// logsURL is the logs resource beside a traces URL that ends in /v1/traces,
// or "" when there is no such resource to derive.
func logsURL(traces string) string {
	u, err := url.Parse(traces)
	if err != nil || !strings.HasSuffix(u.Path, tracesPath) {
		return ""
	}
	u.Path = strings.TrimSuffix(u.Path, tracesPath) + logsPath
	return u.String()
}
