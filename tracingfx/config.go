package tracingfx

import (
	"cmp"
	"errors"
	"io"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
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

// Config holds the tracing options. Where a field is zero, its
// OpenTelemetry variable applies, else the default noted;
// OTEL_SDK_DISABLED=true turns tracing off whatever the Config says.
// docs/configuration.md lists every variable.
type Config struct {
	// ServiceName is the service.name of the resource.
	ServiceName string
	// Exporter selects where spans go.
	Exporter ExporterConfig
	// PluginTracing enables the plugin spans (cache, lock, rate-limit,
	// stream and idempotency operations). Default off: set it to see them.
	PluginTracing bool
	// DisableRedisCommands turns the redis.<COMMAND> spans off (on by default).
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
	// ExporterNone. Default: ExporterOTLP when an endpoint is configured,
	// else ExporterNone (spans are id-only: trace ids still reach the logs).
	Type string
	// Protocol is ProtocolHTTP (OTLP/HTTP with protobuf, the default) or ProtocolGRPC.
	Protocol string
	// Endpoint is the OTLP address, an http(s) URL without user info or
	// query. Over HTTP a base address gets /v1/traces appended, a URL with
	// a path is used as given; over gRPC only scheme, host and port count.
	// Default DefaultHTTPEndpoint or DefaultGRPCEndpoint.
	Endpoint string
	// Headers are sent with every export (credentials), over those of
	// OTEL_EXPORTER_OTLP_HEADERS and its per-signal variables. Never logged.
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
	// ExcludeCommands get no span (case-insensitive), e.g. "PING"; they
	// are still measured in the command metrics.
	ExcludeCommands []string
}

// SamplingConfig configures the sampler.
type SamplingConfig struct {
	// Strategy: SampleAlways, SampleNever, SampleRatio or SampleParent.
	// Default: parent-based always-on.
	Strategy string
	// Ratio is the fraction kept with SampleRatio and SampleParent (0.01 is 1 %).
	Ratio float64
	// KeepErrors exports spans that end with status ERROR even when their
	// trace was not sampled, so that a 1 % sample still shows every failure.
	KeepErrors bool
	// KeepSlowerThan exports spans that last longer than this even when
	// their trace was not sampled. 0 disables. With either Keep option every
	// span is recorded (docs/performance.md gives the cost).
	KeepSlowerThan time.Duration
}

// BatchConfig configures the batch span processor of the OTLP exporter.
// Zero fields take the OTEL_BSP_* variable, else OpenTelemetry's default
// (2048, 512, 5s, 30s).
type BatchConfig struct {
	// MaxQueueSize is how many ended spans wait for export; one that ends
	// when that many wait is dropped and counted (Provider.DroppedSpans,
	// tracing_export_errors_total), so a slow backend never slows the app.
	MaxQueueSize int
	// MaxExportBatchSize is the most spans in one export.
	MaxExportBatchSize int
	// ScheduleDelay is the longest a span waits before export.
	ScheduleDelay time.Duration
	// ExportTimeout bounds one export.
	ExportTimeout time.Duration
}

// OTLP protocols (Config.Exporter.Protocol, OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolHTTP = "http/protobuf" // the default: OTLP over HTTP, port 4318
	ProtocolGRPC = "grpc"          // OTLP over gRPC, port 4317
)

// Default endpoints, used when neither Config nor the environment names one
// (plain HTTP, as a local Collector listens).
const (
	DefaultHTTPEndpoint = "http://localhost:4318/v1/traces"
	DefaultGRPCEndpoint = "http://localhost:4317"
)

const tracesPath, logsPath = "/v1/traces", "/v1/logs"

// normalize validates c, one field after another in declaration order, and
// applies the defaults that do not depend on the environment. A negative
// number or duration takes the default, as zero does.
func (c Config) normalize() (Config, error) {
	c.Exporter.Type = strings.ToLower(c.Exporter.Type)
	err := c.Exporter.check()
	if err == nil {
		err = c.Sampling.check()
	}
	c.Spans.MaxArgLength = cmp.Or(max(c.Spans.MaxArgLength, 0), 256)
	c.ShutdownTimeout = cmp.Or(max(c.ShutdownTimeout, 0), 5*time.Second)
	c.Batch.MaxQueueSize = max(c.Batch.MaxQueueSize, 0)
	return c, err
}

func (e ExporterConfig) check() error {
	switch e.Type {
	case "", ExporterOTLP, ExporterConsole, ExporterJaeger, ExporterZipkin, ExporterNone:
	default:
		return configError("Config.Exporter.Type", "%q is not otlp, console, jaeger, zipkin or none", e.Type)
	}
	if e.Protocol != "" && e.Protocol != ProtocolHTTP && e.Protocol != ProtocolGRPC {
		return configError("Config.Exporter.Protocol", "%q is not %s or %s", e.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if err := checkURL(e.Endpoint); e.Endpoint != "" && err != nil {
		return configError("Config.Exporter.Endpoint", "%s", err)
	}
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(e.Headers[k]) {
			// The value is not shown: it may be a credential.
			return configError("Config.Exporter.Headers", "%q is not a header name, or its value holds a control character such as a line break", k)
		}
	}
	return nil
}

func (s SamplingConfig) check() error {
	switch {
	case !(s.Ratio >= 0 && s.Ratio <= 1): // NaN too
		return configError("Config.Sampling.Ratio", "%v is not between 0 and 1", s.Ratio)
	case s.Strategy != "" && s.Strategy != SampleAlways && s.Strategy != SampleNever && s.Strategy != SampleRatio && s.Strategy != SampleParent:
		return configError("Config.Sampling.Strategy", "%q is not always, never, ratio or parent", s.Strategy)
	case s.Ratio != 0 && s.Strategy != SampleRatio && s.Strategy != SampleParent:
		// A ratio the strategy does not read is a mistake, not a setting.
		return configError("Config.Sampling.Ratio", "%v is set, but only Strategy %q or %q reads it (Strategy is %q)", s.Ratio, SampleRatio, SampleParent, s.Strategy)
	}
	return nil
}

// Validate reports the first invalid field, in declaration order. It does
// not read the environment: NewProvider reports a bad OTEL_* value.
func (c Config) Validate() error {
	_, err := c.normalize()
	return err
}

// tracesURL gives a base address the traces path; a URL with a path is kept.
func tracesURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && (u.Path == "" || u.Path == "/") {
		return joinPath(raw, tracesPath)
	}
	return raw
}

// logsURL is the logs resource beside a URL ending in /v1/traces, else "".
func logsURL(traces string) string {
	if base, ok := strings.CutSuffix(traces, tracesPath); ok {
		return base + logsPath
	}
	return ""
}

func joinPath(raw, p string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = path.Join("/", u.Path, p)
	return u.String()
}

func hostOnly(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host
	}
	return raw
}

// checkURL accepts an http(s) URL with a host and no user info or query,
// which the exporters would not send (a backend reading a key from them
// would refuse every export). The URL is not shown: it may hold a secret.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return errors.New("is not an http(s) URL with a host, such as http://collector:4318")
	case u.User != nil || u.RawQuery != "":
		return errors.New("holds credentials or a query, which the exporter does not send: send them as headers")
	}
	return nil
}
