package tracingfx

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redisfx/redisfx"
)

// Over gRPC, a header start-up accepts is one gRPC sends, and one it
// refuses on every export fails start-up: for each header, the verdict of
// resolve (with the protocol and the header from Config, and from the
// variables) is that of a real gRPC export of the same header to a real
// TraceService. Before, "x-tenant: café" and "x-api-key!: k" (valid over
// HTTP) passed start-up, then every export failed.
func TestEnv_GRPCHeadersAcceptedAreTheOnesGRPCSends(t *testing.T) {
	t.Parallel()
	rc := newGRPCReceiver(t)
	for _, h := range []struct{ k, v string }{
		{"x-scope-orgid", "tenant-1"},
		{"Authorization", "Bearer a.b~c/d+e=="}, // upper case is lowered by the exporter
		{"x_tenant.id", ""},
		{"trace-bin", "café\t"}, // binary metadata: sent base64-encoded
		{"x-tenant", "café"},
		{"x-tenant", "a\tb"}, // a tab is fine in an HTTP value, not in gRPC metadata
		{"x-tenant", "\x7f"},
		{"x-api-key!", "k"},
		{"x+y", "1"},
		{"X~Y", "1"},
	} {
		exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL("http://"+rc.addr),
			otlptracegrpc.WithHeaders(map[string]string{h.k: h.v}), otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sent := exp.ExportSpans(ctx, []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "x"}.Snapshot()})
		_ = exp.Shutdown(ctx)
		cancel()
		if sent != nil && !strings.Contains(sent.Error(), "header key") {
			t.Fatalf("%q: the export failed for another reason: %v", h.k, sent)
		}
		_, fromConfig := resolve(Config{Exporter: ExporterConfig{Protocol: ProtocolGRPC, Headers: map[string]string{h.k: h.v}}}, mapEnv(nil))
		_, fromEnv := resolve(Config{}, mapEnv(map[string]string{envProtocol: ProtocolGRPC, envHeaders: h.k + "=" + url.PathEscape(h.v)}))
		for _, got := range []error{fromConfig, fromEnv} {
			if (got == nil) != (sent == nil) {
				t.Errorf("%q: start-up error %v, but gRPC export error %v", h.k, got, sent)
			}
		}
	}
}

// The error names the variable or Config.Exporter.Headers, and where the
// grpc protocol came from; it never shows the value. Over HTTP the same
// headers are fine.
func TestEnv_GRPCHeadersFailStartUpNamingTheSource(t *testing.T) {
	t.Parallel()
	const (
		name  = `"x-api-key!" is not a gRPC metadata name (the protocol is grpc, from %s): over gRPC a header name may hold only letters, digits, -, _ and .`
		value = `the value of "x-tenant" holds a character gRPC refuses (the protocol is grpc, from %s): over gRPC a value may hold only printable ASCII, ` +
			`no tab and no letter such as é, unless the name ends in -bin (the value is not shown: it may be a credential)`
	)
	cases := []struct {
		cfg   Config
		env   map[string]string
		field string
		want  string
	}{
		{Config{Exporter: ExporterConfig{Protocol: ProtocolGRPC, Headers: map[string]string{"x-api-key!": "s3cret"}}}, nil,
			"Config.Exporter.Headers", fmt.Sprintf(name, "Config.Exporter.Protocol")},
		{Config{Exporter: ExporterConfig{Protocol: ProtocolGRPC, Headers: map[string]string{"x-tenant": "s3cretè"}}}, nil,
			"Config.Exporter.Headers", fmt.Sprintf(value, "Config.Exporter.Protocol")},
		{Config{Exporter: ExporterConfig{Headers: map[string]string{"x-tenant": "s3cretè"}}}, map[string]string{envProtocol: ProtocolGRPC},
			"Config.Exporter.Headers", fmt.Sprintf(value, envProtocol)},
		{Config{Exporter: ExporterConfig{Protocol: ProtocolGRPC}}, map[string]string{envHeaders: "x-api-key!=s3cret"},
			envHeaders, fmt.Sprintf(name, "Config.Exporter.Protocol")},
		{Config{}, map[string]string{envTracesProtocol: ProtocolGRPC, envTracesHeaders: "authorization=x,x-tenant=s3cret%C3%A8"},
			envTracesHeaders, fmt.Sprintf(value, envTracesProtocol)},
	}
	for _, c := range cases {
		p, err := newProvider(context.Background(), c.cfg, mapEnv(c.env))
		if err == nil {
			_ = p.Shutdown(context.Background())
			t.Errorf("%v %v: no error", c.cfg.Exporter, c.env)
			continue
		}
		var cerr *redisfx.ConfigError
		if !errors.As(err, &cerr) || cerr.Field != c.field || err.Error() != "tracingfx: invalid "+c.field+": "+c.want {
			t.Errorf("%v %v:\ngot  %v\nwant tracingfx: invalid %s: %s", c.cfg.Exporter, c.env, err, c.field, c.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the value was shown: %v", err)
		}
		if c.cfg.Exporter.Protocol != "" {
			// Config.Validate, which reads no variable, sees the Config's own.
			if verr := c.cfg.Validate(); c.field == "Config.Exporter.Headers" && (verr == nil || verr.Error() != err.Error()) {
				t.Errorf("Validate: %v, want %v", verr, err)
			}
		}
		// Over HTTP (the default), the same headers are sent as they are.
		httpCfg := c.cfg
		httpCfg.Exporter.Protocol = ""
		env := map[string]string{}
		for k, v := range c.env {
			if k != envProtocol && k != envTracesProtocol {
				env[k] = v
			}
		}
		if _, err := resolve(httpCfg, mapEnv(env)); err != nil {
			t.Errorf("over HTTP: %v", err)
		}
	}
}
