package tracingfx

import (
	"math"
	"testing"
)

func TestConfig_InvalidValuesNameTheField(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Exporter: ExporterConfig{Type: "carrier-pigeon"}}, `tracingfx: invalid Config.Exporter.Type: "carrier-pigeon" is not otlp, console, jaeger, zipkin or none`},
		{Config{Exporter: ExporterConfig{Protocol: "http/json"}}, `tracingfx: invalid Config.Exporter.Protocol: "http/json" is not http/protobuf or grpc`},
		{Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: "collector:4318"}}, `tracingfx: invalid Config.Exporter.Endpoint: is not an http(s) URL with a host, such as http://collector:4318`},
		{Config{Exporter: ExporterConfig{Headers: map[string]string{"bad header": "x", "also:bad": "y"}}}, `tracingfx: invalid Config.Exporter.Headers: "also:bad" is not a header name, or its value holds a control character such as a line break`},
		{Config{Exporter: ExporterConfig{Headers: map[string]string{"authorization": "Bearer abc\n"}}}, `tracingfx: invalid Config.Exporter.Headers: "authorization" is not a header name, or its value holds a control character such as a line break`},
		{Config{Sampling: SamplingConfig{Strategy: "sometimes"}}, `tracingfx: invalid Config.Sampling.Strategy: "sometimes" is not always, never, ratio or parent`},
		{Config{Sampling: SamplingConfig{Strategy: SampleRatio, Ratio: 1.5}}, `tracingfx: invalid Config.Sampling.Ratio: 1.5 is not between 0 and 1`},
		{Config{Sampling: SamplingConfig{Strategy: SampleRatio, Ratio: math.NaN()}}, `tracingfx: invalid Config.Sampling.Ratio: NaN is not between 0 and 1`},
		{Config{Exporter: ExporterConfig{Endpoint: "http://user:pa55w0rd@c:4318"}}, `tracingfx: invalid Config.Exporter.Endpoint: holds credentials or a query, which the exporter does not send: send them as headers`},
		{Config{Sampling: SamplingConfig{Ratio: 5}}, `tracingfx: invalid Config.Sampling.Ratio: 5 is not between 0 and 1`},
		{Config{Sampling: SamplingConfig{Strategy: SampleAlways, Ratio: -3}}, `tracingfx: invalid Config.Sampling.Ratio: -3 is not between 0 and 1`},
		{Config{Sampling: SamplingConfig{Ratio: 0.1}}, `tracingfx: invalid Config.Sampling.Ratio: 0.1 is set, but only Strategy "ratio" or "parent" reads it (Strategy is "")`},
	} {
		if err := c.cfg.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("got  %v\nwant %s", err, c.want)
		}
	}
}

// Config.Exporter.Endpoint: a base address gets /v1/traces, a URL with a
// path is used as given; the log bridge's endpoint is beside /v1/traces.
func TestEndpointForms(t *testing.T) {
	for in, want := range map[string]string{
		"http://collector:4318":             "http://collector:4318/v1/traces",
		"http://collector:4318/":            "http://collector:4318/v1/traces",
		"https://tempo.example/otlp/traces": "https://tempo.example/otlp/traces",
		"http://collector:4318/v1/traces":   "http://collector:4318/v1/traces",
	} {
		if got := tracesURL(in); got != want {
			t.Errorf("tracesURL(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"http://c:4318/v1/traces":           "http://c:4318/v1/logs",
		"https://gw.example/otlp/v1/traces": "https://gw.example/otlp/v1/logs",
		"https://tempo.example/otlp/traces": "",
	} {
		if got := logsURL(in); got != want {
			t.Errorf("logsURL(%q) = %q, want %q", in, got, want)
		}
	}
}
