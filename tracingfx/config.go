package tracingfx

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// Exporter types. Every type but Console and None sends OTLP over HTTP; the
// label (otlp, jaeger, zipkin) is semantic only: Jaeger and Zipkin-compatible
// backends such as Tempo all accept OTLP today.
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

// Config holds the TracingPlugin options of the spec. Zero fields take the
// defaults noted; where the application sets nothing, the standard OTEL_*
// environment variables apply (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_*).
type Config struct {
	// ServiceName is the service.name of the resource. Default: OTEL_SERVICE_NAME,
	// else "unknown_service:<binary>" as OpenTelemetry does.
	ServiceName string
	// Exporter selects where spans go. Default ExporterNone: spans are made
	// (so trace ids reach the logs) but not exported.
	Exporter ExporterConfig
	// PluginTracing enables the plugin spans (idempotency.wait, and the
	// cache, lock, rate-limit and stream spans of later modules). Default off.
	PluginTracing bool
	// DisableRedisCommands turns the redis.<COMMAND> spans off (the spec's
	// traceRedisCommands=false). They are on by default.
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
	// ExporterNone.
	Type string
	// Endpoint is the OTLP/HTTP address. A base address such as
	// http://collector:4318 gets /v1/traces appended; a URL with a path is
	// used as given. Default: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else
	// http://localhost:4318/v1/traces.
	Endpoint string
	// Headers are sent with every export: credentials for the backend (an
	// API key, a tenant, "authorization: Bearer <ACCESS_TOKEN>"). They are
	// never logged.
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
	// ExcludeCommands get no span (case-insensitive), e.g. "PING".
	ExcludeCommands []string
}

// SamplingConfig configures the sampler.
type SamplingConfig struct {
	// Strategy: SampleAlways, SampleNever, SampleRatio or SampleParent.
	// Default: OTEL_TRACES_SAMPLER, else parent-based always-on.
	Strategy string
	// Ratio is the fraction kept with SampleRatio and SampleParent (0.01 is 1 %).
	Ratio float64
	// KeepErrors exports spans that end with status ERROR even when their
	// trace was not sampled (the spec: "always sample errors").
	KeepErrors bool
	// KeepSlowerThan exports spans that last longer than this even when
	// their trace was not sampled (the spec: "always sample slow
	// operations"). 0 disables. With KeepErrors or KeepSlowerThan every span
	// is recorded, then dropped at its end if not kept: see docs/tracing.md
	// for the measured cost.
	KeepSlowerThan time.Duration
}

// BatchConfig configures the batch span processor. Defaults are the spec's:
// queue 2048, batch 512, interval 5s, export timeout 30s.
type BatchConfig struct {
	MaxQueueSize       int
	MaxExportBatchSize int
	ScheduleDelay      time.Duration
	ExportTimeout      time.Duration
}

// ConfigError names the invalid option.
type ConfigError struct {
	Option string
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string { return "tracingfx: invalid " + e.Option + ": " + e.Reason }

func bad(opt, format string, args ...any) error {
	return &ConfigError{Option: opt, Reason: fmt.Sprintf(format, args...)}
}

// normalize validates c and applies defaults.
func (c Config) normalize() (Config, error) {
	c.Exporter.Type = strings.ToLower(c.Exporter.Type)
	switch c.Exporter.Type {
	case "":
		c.Exporter.Type = ExporterNone
	case ExporterOTLP, ExporterConsole, ExporterJaeger, ExporterZipkin, ExporterNone:
	default:
		return c, bad("Exporter.Type", "%q is not otlp, console, jaeger, zipkin or none", c.Exporter.Type)
	}
	if c.Exporter.Endpoint != "" {
		u, err := url.Parse(c.Exporter.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, bad("Exporter.Endpoint", "%q is not an http(s) URL", c.Exporter.Endpoint)
		}
	}
	for k := range c.Exporter.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n") {
			return c, bad("Exporter.Headers", "%q is not a header name", k)
		}
	}
	switch c.Sampling.Strategy {
	case "", SampleAlways, SampleNever:
	case SampleRatio, SampleParent:
		if c.Sampling.Ratio < 0 || c.Sampling.Ratio > 1 {
			return c, bad("Sampling.Ratio", "%v is not between 0 and 1", c.Sampling.Ratio)
		}
	default:
		return c, bad("Sampling.Strategy", "%q is not always, never, ratio or parent", c.Sampling.Strategy)
	}
	if c.Sampling.KeepSlowerThan < 0 {
		return c, bad("Sampling.KeepSlowerThan", "%v is negative", c.Sampling.KeepSlowerThan)
	}
	if c.Spans.MaxArgLength < 0 {
		return c, bad("Spans.MaxArgLength", "%d is negative", c.Spans.MaxArgLength)
	} else if c.Spans.MaxArgLength == 0 {
		c.Spans.MaxArgLength = 256
	}
	for name, v := range map[string]int{"Batch.MaxQueueSize": c.Batch.MaxQueueSize, "Batch.MaxExportBatchSize": c.Batch.MaxExportBatchSize} {
		if v < 0 {
			return c, bad(name, "%d is negative", v)
		}
	}
	if c.Batch.MaxExportBatchSize > 0 && c.Batch.MaxQueueSize > 0 && c.Batch.MaxExportBatchSize > c.Batch.MaxQueueSize {
		return c, bad("Batch.MaxExportBatchSize", "%d is larger than Batch.MaxQueueSize %d", c.Batch.MaxExportBatchSize, c.Batch.MaxQueueSize)
	}
	for name, d := range map[string]time.Duration{"Batch.ScheduleDelay": c.Batch.ScheduleDelay, "Batch.ExportTimeout": c.Batch.ExportTimeout, "ShutdownTimeout": c.ShutdownTimeout} {
		if d < 0 {
			return c, bad(name, "%v is negative", d)
		}
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	return c, nil
}

// Validate reports the first invalid option.
func (c Config) Validate() error {
	_, err := c.normalize()
	return err
}

// tracesURL turns an endpoint into the URL of the traces resource: a base
// address gets /v1/traces, a URL with a path is kept.
func tracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return endpoint
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String()
}

// logsURL is the logs resource beside a traces endpoint.
func logsURL(endpoint string) string {
	u, err := url.Parse(tracesURL(endpoint))
	if err != nil {
		return endpoint
	}
	if strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/v1/traces") + "/v1/logs"
	}
	return u.String()
}
