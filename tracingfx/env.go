package tracingfx

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"golang.org/x/net/http/httpguts"

	"github.com/redisfx/redisfx"
)

// The standard OpenTelemetry environment variables tracingfx reads itself,
// so that a bad value fails start-up naming the variable (the SDK would
// print a line and carry on). A Config field that is set wins over its
// variable; see docs/configuration.md for the table.
const (
	envSDKDisabled       = "OTEL_SDK_DISABLED"
	envServiceName       = "OTEL_SERVICE_NAME"
	envResourceAttrs     = "OTEL_RESOURCE_ATTRIBUTES"
	envTracesExporter    = "OTEL_TRACES_EXPORTER"
	envLogsExporter      = "OTEL_LOGS_EXPORTER"
	envProtocol          = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol    = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envEndpoint          = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint    = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envLogsEndpoint      = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
	envHeaders           = "OTEL_EXPORTER_OTLP_HEADERS"
	envTracesHeaders     = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envLogsHeaders       = "OTEL_EXPORTER_OTLP_LOGS_HEADERS"
	envSampler           = "OTEL_TRACES_SAMPLER"
	envSamplerArg        = "OTEL_TRACES_SAMPLER_ARG"
	envPropagators       = "OTEL_PROPAGATORS"
	envBSPScheduleDelay  = "OTEL_BSP_SCHEDULE_DELAY"
	envBSPExportTimeout  = "OTEL_BSP_EXPORT_TIMEOUT"
	envBSPMaxQueueSize   = "OTEL_BSP_MAX_QUEUE_SIZE"
	envBSPMaxExportBatch = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
	envTimeout           = "OTEL_EXPORTER_OTLP_TIMEOUT"
	envTracesTimeout     = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	envLogsTimeout       = "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT"
)

// OTLP protocols (Config.Exporter.Protocol, OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolHTTP = "http/protobuf" // the default: OTLP over HTTP, port 4318
	ProtocolGRPC = "grpc"          // OTLP over gRPC, port 4317
)

// Default endpoints, used when neither Config nor the environment names one.
// OpenTelemetry Go's own default is https://localhost:4318, which a local
// Collector (plain HTTP) answers with an error: tracingfx says http.
const (
	DefaultHTTPEndpoint = "http://localhost:4318/v1/traces"
	DefaultGRPCEndpoint = "http://localhost:4317"
)

const tracesPath, logsPath = "/v1/traces", "/v1/logs"

// envError is the error for a variable's bad value: the same shape as a
// bad Config field, naming the variable.
func envError(name, format string, args ...any) error {
	return redisfx.NewConfigError("tracingfx", name, fmt.Sprintf(format, args...))
}

// settings is a normalized Config with the environment folded in: what the
// provider is built from, and what the module logs at start.
type settings struct {
	Config
	// disabled is OTEL_SDK_DISABLED=true: no spans are made at all.
	disabled bool
	// sampler is never nil; samplerName describes it for the log.
	sampler     sdktrace.Sampler
	samplerName string
	// traces and logs are the OTLP endpoints (logs.url "" when the log
	// bridge cannot send).
	traces, logs endpoint
	// protocolFrom is where Exporter.Protocol came from: the Config field,
	// a variable, or "default".
	protocolFrom string
	// headers are sent with every export of spans: the environment's
	// (OTEL_EXPORTER_OTLP_HEADERS, then _TRACES_HEADERS), then Config's.
	headers map[string]string
	// logHeaders are the log bridge's: OTEL_EXPORTER_OTLP_HEADERS, then
	// _LOGS_HEADERS, then Config's. Both are always handed to the
	// exporters, so that they never read (and print) a variable themselves.
	logHeaders map[string]string
	propagator propagation.TextMapPropagator
	// propagators names the propagators, for the log.
	propagators string
	// resource are the attributes of OTEL_RESOURCE_ATTRIBUTES, then
	// service.name of OTEL_SERVICE_NAME, then of Config.ServiceName (the
	// later wins for one key), over the SDK's default resource.
	resource []attribute.KeyValue
	// exportLogs is false with OTEL_LOGS_EXPORTER=none.
	exportLogs bool
	// warnings are accepted values that are probably mistakes; the module
	// logs them at start.
	warnings []string
}

// endpoint is an OTLP URL and where it came from (a Config field, a
// variable, or "default").
type endpoint struct{ url, source string }

// resolve validates cfg, then reads the environment through getenv for
// what cfg leaves unset. The first invalid value is reported, Config
// fields in declaration order, then variables in the order of the table
// in docs/configuration.md.
func resolve(cfg Config, getenv func(string) string) (settings, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return settings{}, err
	}
	s := settings{Config: cfg}
	steps := []func(getenv func(string) string) error{
		s.readDisabled, s.readResource, s.readExporter, s.readProtocol, s.readEndpoints, s.readHeaders,
		s.readSampler, s.readPropagators, s.readBatch, checkExportTimeouts, s.readLogsExporter,
	}
	for _, step := range steps {
		if err := step(getenv); err != nil {
			return settings{}, err
		}
	}
	return s, nil
}

// override notes a variable that a Config field overrides, so an operator
// who set it learns why it has no effect.
func (s *settings) override(getenv func(string) string, name, field string, set bool) {
	if v := getenv(name); v != "" && set {
		s.warnings = append(s.warnings, fmt.Sprintf("%s is set but Config.%s wins (an explicit Config field overrides its variable)", name, field))
	}
}

func (s *settings) readDisabled(getenv func(string) string) error {
	switch v := strings.TrimSpace(getenv(envSDKDisabled)); strings.ToLower(v) {
	case "", "false":
	case "true":
		s.disabled = true
	default:
		return envError(envSDKDisabled, "%q is not true or false", v)
	}
	return nil
}

// readResource reads OTEL_RESOURCE_ATTRIBUTES (key=value,…, values
// URL-encoded) and OTEL_SERVICE_NAME, as OpenTelemetry's resource would, but
// a bad entry or a bad escape fails start-up (the SDK would print a line
// and export the raw text). Values are never repeated in an error: an
// attribute may be sensitive. Config.ServiceName wins over both, with a
// warning for each variable it overrides.
func (s *settings) readResource(getenv func(string) string) error {
	set := s.ServiceName != ""
	s.override(getenv, envServiceName, "ServiceName", set)
	if raw := strings.TrimSpace(getenv(envResourceAttrs)); raw != "" {
		for i, entry := range strings.Split(raw, ",") {
			k, v, ok := strings.Cut(entry, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return envError(envResourceAttrs, "entry %d is not key=value (write key1=value1,key2=value2; the values are not shown: they may be sensitive)", i+1)
			}
			value, err := url.PathUnescape(strings.TrimSpace(v))
			if err != nil {
				return envError(envResourceAttrs, "the value of %q is not URL-encoded correctly (write %%20 for a space, %%25 for %%; the value is not shown: it may be sensitive)", k)
			}
			if !utf8.ValidString(k) || !utf8.ValidString(value) {
				// OTLP carries only UTF-8: the exporter would refuse every
				// request, each holding the resource (helper-75).
				return envError(envResourceAttrs, "entry %d is not valid UTF-8 once decoded (OTLP carries only UTF-8; write other characters in UTF-8, URL-encoded; the entry is not shown: it may be sensitive)", i+1)
			}
			if k == string(semconv.ServiceNameKey) && set {
				s.warnings = append(s.warnings, fmt.Sprintf("%s sets %s but Config.ServiceName wins (an explicit Config field overrides its variable)", envResourceAttrs, k))
			}
			s.resource = append(s.resource, attribute.String(k, value))
		}
	}
	if v := strings.TrimSpace(getenv(envServiceName)); v != "" {
		if !utf8.ValidString(v) {
			return envError(envServiceName, "is not valid UTF-8 (OTLP carries only UTF-8)")
		}
		s.resource = append(s.resource, semconv.ServiceName(v))
	}
	if set {
		s.resource = append(s.resource, semconv.ServiceName(s.ServiceName))
	}
	return nil
}

// readExporter: Config.Exporter.Type, else OTEL_TRACES_EXPORTER, else otlp
// when an endpoint is configured, else none.
func (s *settings) readExporter(getenv func(string) string) error {
	s.override(getenv, envTracesExporter, "Exporter.Type", s.Exporter.Type != "")
	if s.Exporter.Type != "" {
		return nil
	}
	switch v := strings.TrimSpace(getenv(envTracesExporter)); v {
	case "":
		s.Exporter.Type = ExporterNone
		if s.Exporter.Endpoint != "" || getenv(envEndpoint) != "" || getenv(envTracesEndpoint) != "" {
			s.Exporter.Type = ExporterOTLP
		}
	case ExporterOTLP, ExporterConsole, ExporterNone:
		s.Exporter.Type = v
	case "zipkin", "jaeger":
		return envError(envTracesExporter, "%q is that backend's own protocol, which tracingfx does not send: use otlp (Jaeger and Zipkin-compatible backends accept OTLP), or Config.Exporter.Type %q", v, v)
	default:
		if strings.Contains(v, ",") {
			return envError(envTracesExporter, "%q names several exporters; tracingfx sends to one: otlp, console or none", v)
		}
		return envError(envTracesExporter, "%q is not otlp, console or none", v)
	}
	return nil
}

// readProtocol: Config.Exporter.Protocol, else the traces variable, else
// the generic one, else http/protobuf.
func (s *settings) readProtocol(getenv func(string) string) error {
	set := s.Exporter.Protocol != ""
	s.override(getenv, envTracesProtocol, "Exporter.Protocol", set)
	s.override(getenv, envProtocol, "Exporter.Protocol", set)
	if set {
		s.protocolFrom = "Config.Exporter.Protocol"
		return nil
	}
	for _, name := range []string{envTracesProtocol, envProtocol} {
		switch v := strings.TrimSpace(getenv(name)); v {
		case "":
			continue
		case ProtocolHTTP, ProtocolGRPC:
			s.Exporter.Protocol, s.protocolFrom = v, name
			return nil
		case "http/json":
			return envError(name, "%q is not supported by the OpenTelemetry Go exporter: use http/protobuf or grpc", v)
		default:
			return envError(name, "%q is not http/protobuf or grpc", v)
		}
	}
	s.Exporter.Protocol, s.protocolFrom = ProtocolHTTP, "default"
	return nil
}

// readEndpoints resolves the traces endpoint (and the logs endpoint of the
// log bridge) by OpenTelemetry's rules: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is used as given; OTEL_EXPORTER_OTLP_ENDPOINT is a base to which
// /v1/traces is appended, whatever its path. Config.Exporter.Endpoint
// keeps its own rule: a base address gets /v1/traces, a URL with a path is
// used as given. gRPC uses the scheme, host and port only.
func (s *settings) readEndpoints(getenv func(string) string) error {
	set := s.Exporter.Endpoint != ""
	s.override(getenv, envTracesEndpoint, "Exporter.Endpoint", set)
	s.override(getenv, envEndpoint, "Exporter.Endpoint", set)
	generic := strings.TrimSpace(getenv(envEndpoint))
	tracesOnly := strings.TrimSpace(getenv(envTracesEndpoint))
	logsOnly := strings.TrimSpace(getenv(envLogsEndpoint))
	for _, v := range []struct{ name, value string }{{envTracesEndpoint, tracesOnly}, {envEndpoint, generic}, {envLogsEndpoint, logsOnly}} {
		if v.value == "" {
			continue
		}
		if _, err := parseHTTPURL(v.value); err != nil {
			return envError(v.name, "%q %s", redactedURL(v.value), err.Error())
		}
	}
	const fromConfig = "Config.Exporter.Endpoint"
	src := endpoint{source: "default"}
	switch {
	case set:
		src = endpoint{s.Exporter.Endpoint, fromConfig}
	case tracesOnly != "":
		src = endpoint{tracesOnly, envTracesEndpoint}
	case generic != "":
		src = endpoint{generic, envEndpoint}
	}
	if s.Exporter.Protocol == ProtocolGRPC {
		s.traces = endpoint{DefaultGRPCEndpoint, src.source}
		if src.url != "" {
			s.traces.url = hostOnly(src.url)
		}
		s.logs = s.traces
		if logsOnly != "" {
			s.logs = endpoint{hostOnly(logsOnly), envLogsEndpoint}
		}
		return nil
	}
	switch src.source {
	case fromConfig:
		s.traces = endpoint{tracesURL(src.url), src.source}
		s.logs = endpoint{logsURL(s.traces.url), src.source}
	case envTracesEndpoint:
		s.traces = endpoint{withRootPath(src.url), src.source}
		s.logs = endpoint{logsURL(s.traces.url), src.source}
	case envEndpoint:
		s.traces = endpoint{joinPath(src.url, tracesPath), src.source}
		s.logs = endpoint{joinPath(src.url, logsPath), src.source}
		if u, _ := url.Parse(src.url); strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), tracesPath) {
			s.warnings = append(s.warnings, fmt.Sprintf("%s ends in %s, and OpenTelemetry appends %s to it, so spans go to %s, which a Collector answers with 404: "+
				"set it to the base address (%s) or set %s instead", envEndpoint, tracesPath, tracesPath, s.traces.url, baseOf(src.url), envTracesEndpoint))
		}
	default:
		s.traces = endpoint{DefaultHTTPEndpoint, src.source}
		s.logs = endpoint{logsURL(DefaultHTTPEndpoint), src.source}
	}
	if logsOnly != "" {
		s.logs = endpoint{withRootPath(logsOnly), envLogsEndpoint}
	}
	return nil
}

// hostOnly is the scheme, host and port of a URL: a gRPC target.
func hostOnly(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Scheme + "://" + u.Host
}

// parseHTTPURL accepts an http or https URL with a host, a port (if any)
// between 1 and 65535, and without credentials: the OTLP exporters send
// only host and path, so a user and password in the URL would be dropped in
// silence and every export refused by the backend; a port out of range
// would fail every export.
func parseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil && u.User != nil {
		return nil, errors.New("holds credentials, which the OTLP exporter does not send: put them in OTEL_EXPORTER_OTLP_HEADERS (Authorization=Basic%20<base64 of user:password>) or Config.Exporter.Headers")
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		hint := ""
		if err == nil && u.Scheme != "http" && u.Scheme != "https" && !strings.Contains(raw, "://") {
			hint = " (write http://" + redactedURL(raw) + ")"
		}
		return nil, fmt.Errorf("is not an http(s) URL%s", hint)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("has port %s, which is not between 1 and 65535", p)
		}
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
		return nil, errors.New("has a query or a fragment, which the OTLP exporter does not send: " +
			"a backend that reads a key or a tenant from it would refuse every export; send it as a header " +
			"(OTEL_EXPORTER_OTLP_HEADERS or Config.Exporter.Headers)")
	}
	return u, nil
}

// redactedURL is raw fit for an error message or a log line: the password
// of its user info shown as xxxxx, and its query and fragment (where API
// keys travel) as ?xxxxx and #xxxxx. It reads raw as text, not as a parsed
// URL, because the URLs it is given are often the ones that failed to
// parse (a % in the password, a typo in the port, no scheme).
func redactedURL(raw string) string {
	prefix, rest := "", raw
	if i := strings.Index(rest, "://"); i > 0 && isScheme(rest[:i]) { // not a :// in a password or a query
		prefix, rest = rest[:i+3], rest[i+3:]
	}
	// The last @ ends the user info, and the password runs from the first
	// colon to it: a password may hold /, ?, # or @ unescaped. (An @ in a
	// query hides more than the password: safe, and the query goes anyway.)
	// User info without a colon is often a token (https://<key>@host): it
	// is hidden whole.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
			rest = rest[:colon+1] + "xxxxx" + rest[at:]
		} else {
			rest = "xxxxx" + rest[at:]
		}
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i+1] + "xxxxx"
	}
	return prefix + rest
}

// isScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, +, - or .).
func isScheme(s string) bool {
	for i, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// joinPath appends p to the URL's path, as OpenTelemetry does with
// OTEL_EXPORTER_OTLP_ENDPOINT.
func joinPath(raw, p string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = path.Join("/", u.Path, p)
	return u.String()
}

// withRootPath is a signal-specific endpoint as OpenTelemetry uses it: as
// given, with / when it has no path.
func withRootPath(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String()
}

// baseOf strips a trailing /v1/traces, for the hint of the warning.
func baseOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), tracesPath)
	return u.String()
}

// readHeaders merges OTEL_EXPORTER_OTLP_HEADERS, then
// OTEL_EXPORTER_OTLP_TRACES_HEADERS, then Config.Exporter.Headers: the
// later wins for the same header, whatever the case of its name (HTTP
// header names are case-insensitive; two spellings of one name would both
// be sent, in map order). A header of Config.Exporter.Headers that a
// variable sets too gets a warning naming the variable and the header (not
// its value). A name that is not an HTTP token or a value with a control
// character (CR, LF …) could never be sent: every export would fail, so
// start-up fails instead. Over gRPC the same goes for what gRPC refuses
// (see grpcHeaderProblem), whether the protocol came from Config or a
// variable. Values are never repeated in an error.
func (s *settings) readHeaders(getenv func(string) string) error {
	grpcFrom := "" // where the grpc protocol came from, if it is grpc
	if s.Exporter.Protocol == ProtocolGRPC {
		grpcFrom = s.protocolFrom
		// Config.Validate checked the Config headers against a grpc
		// Config.Exporter.Protocol; a variable's grpc is checked here.
		for _, k := range slices.Sorted(maps.Keys(s.Exporter.Headers)) {
			if problem := grpcHeaderProblem(k, s.Exporter.Headers[k], grpcFrom); problem != "" {
				return bad("Exporter.Headers", "%s", problem)
			}
		}
	}
	var err error
	overridden := map[string][]string{} // variable → headers Config overrides
	if s.headers, err = s.mergeHeaders(getenv, grpcFrom, overridden, envHeaders, envTracesHeaders); err != nil {
		return err
	}
	if s.logHeaders, err = s.mergeHeaders(getenv, grpcFrom, overridden, envHeaders, envLogsHeaders); err != nil {
		return err
	}
	for _, name := range []string{envHeaders, envTracesHeaders, envLogsHeaders} {
		if keys := slices.Compact(slices.Sorted(slices.Values(overridden[name]))); len(keys) > 0 {
			s.warnings = append(s.warnings, fmt.Sprintf("%s sets %s but Config.Exporter.Headers wins (an explicit Config field overrides its variable)",
				name, strings.Join(keys, ", ")))
		}
	}
	return nil
}

// mergeHeaders reads the variables named, a later one winning per header,
// then Config's headers over them, noting in overridden the headers of a
// variable that Config overrides.
func (s *settings) mergeHeaders(getenv func(string) string, grpcFrom string, overridden map[string][]string, names ...string) (map[string]string, error) {
	headers := map[string]string{}
	from := map[string]string{} // header → the variable that set it last
	for _, name := range names {
		vars := map[string]string{}
		if err := parseHeaders(name, getenv(name), grpcFrom, vars); err != nil {
			return nil, err
		}
		for k, v := range vars {
			headers[k], from[k] = v, name
		}
	}
	for k, v := range s.Exporter.Headers { // checked by Config.Validate
		k = http.CanonicalHeaderKey(k)
		if name, ok := from[k]; ok {
			overridden[name] = append(overridden[name], k)
		}
		headers[k] = v
	}
	return headers, nil
}

// parseHeaders reads "key1=value1,key2=value2" (values URL-encoded) into
// into. With grpcFrom set (where the grpc protocol came from), each header
// must be one gRPC sends, too.
func parseHeaders(name, raw, grpcFrom string, into map[string]string) error {
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	for i, entry := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(entry, "=")
		k = strings.TrimSpace(k)
		if !ok || !httpguts.ValidHeaderFieldName(k) {
			return envError(name, "entry %d is not key=value with a valid header name (the values are not shown: they may be credentials)", i+1)
		}
		value, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return envError(name, "the value of %q is not URL-encoded correctly", k)
		}
		if !httpguts.ValidHeaderFieldValue(value) {
			return envError(name, "the value of %q holds a control character such as a line break once decoded (the value is not shown: it may be a credential)", k)
		}
		if grpcFrom != "" {
			if problem := grpcHeaderProblem(k, value, grpcFrom); problem != "" {
				return envError(name, "%s", problem)
			}
		}
		into[http.CanonicalHeaderKey(k)] = value
	}
	return nil
}

// grpcKeyByte reports whether c may be in a gRPC metadata name (a-z, 0-9, -, _ or .).
func grpcKeyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '_' || c == '.'
}

// grpcHeaderProblem says why gRPC would refuse header k with value v on
// every export, or is "" when it would not. gRPC-Go checks the metadata
// before each call (google.golang.org/grpc/internal/metadata.ValidatePair):
// the name, which the exporter lower-cases, may hold only a-z, 0-9, -, _
// and .; the value only printable ASCII (0x20-0x7E), unless the name ends
// in -bin (binary metadata, sent base64-encoded). k is already an HTTP
// token. grpcFrom names where the grpc protocol came from. The value is
// never part of the answer: it may be a credential.
func grpcHeaderProblem(k, v, grpcFrom string) string {
	key := strings.ToLower(k)
	for i := 0; i < len(key); i++ {
		if !grpcKeyByte(key[i]) {
			return fmt.Sprintf("%q is not a gRPC metadata name (the protocol is grpc, from %s): over gRPC a header name may hold only letters, digits, -, _ and .", k, grpcFrom)
		}
	}
	if strings.HasSuffix(key, "-bin") {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return fmt.Sprintf("the value of %q holds a character gRPC refuses (the protocol is grpc, from %s): over gRPC a value may hold only printable ASCII, "+
				"no tab and no letter such as é, unless the name ends in -bin (the value is not shown: it may be a credential)", k, grpcFrom)
		}
	}
	return ""
}

// readSampler: Config.Sampling.Strategy, else OTEL_TRACES_SAMPLER (with
// OTEL_TRACES_SAMPLER_ARG), else parent-based always-on. A set
// OTEL_TRACES_SAMPLER_ARG must be a ratio whatever the sampler, so that a
// typo never passes; when the sampler in effect does not read it (a Config
// strategy, or a sampler that takes no ratio, the default one included),
// a warning says so: an operator who sets 0.01 alone would otherwise keep
// every trace in silence.
func (s *settings) readSampler(getenv func(string) string) error {
	set := s.Sampling.Strategy != ""
	s.override(getenv, envSampler, "Sampling.Strategy", set)
	s.override(getenv, envSamplerArg, "Sampling.Strategy", set)
	var base sdktrace.Sampler
	if set {
		if _, err := samplerArg(getenv); err != nil {
			return err
		}
		base, s.samplerName = configSampler(s.Sampling)
	} else {
		var err error
		if base, s.samplerName, err = envSamplerOf(getenv); err != nil {
			return err
		}
		if name := strings.TrimSpace(getenv(envSampler)); strings.TrimSpace(getenv(envSamplerArg)) != "" && !ratioSampler(name) {
			which := name
			if name == "" {
				which = "not set (so parentbased_always_on)"
			}
			s.warnings = append(s.warnings, fmt.Sprintf("%s is set but %s is %s, which takes no ratio, so the argument is ignored "+
				"(set %s=parentbased_traceidratio or traceidratio to sample by ratio)", envSamplerArg, envSampler, which, envSampler))
		}
	}
	if keeps(s.Sampling) {
		base = recordAll{base}
		s.samplerName += " (keeping errors and slow spans)"
	}
	s.sampler = base
	return nil
}

// configSampler maps a Config strategy.
func configSampler(c SamplingConfig) (sdktrace.Sampler, string) {
	switch c.Strategy {
	case SampleAlways:
		return sdktrace.AlwaysSample(), SampleAlways
	case SampleNever:
		return sdktrace.NeverSample(), SampleNever
	case SampleRatio:
		return sdktrace.TraceIDRatioBased(c.Ratio), SampleRatio + " " + strconv.FormatFloat(c.Ratio, 'g', -1, 64)
	}
	root := sdktrace.AlwaysSample()
	if c.Ratio > 0 {
		root = sdktrace.TraceIDRatioBased(c.Ratio)
	}
	return sdktrace.ParentBased(root), SampleParent + " " + strconv.FormatFloat(c.Ratio, 'g', -1, 64)
}

// ratioSampler reports whether the OTEL_TRACES_SAMPLER sampler name reads
// OTEL_TRACES_SAMPLER_ARG.
func ratioSampler(name string) bool {
	return name == "traceidratio" || name == "parentbased_traceidratio"
}

// samplerArg is OTEL_TRACES_SAMPLER_ARG, 1 when unset, or an error when it
// is set to anything but a number between 0 and 1, whatever the sampler.
func samplerArg(getenv func(string) string) (float64, error) {
	arg := strings.TrimSpace(getenv(envSamplerArg))
	if arg == "" {
		return 1, nil
	}
	f, err := strconv.ParseFloat(arg, 64)
	if err != nil || !(f >= 0 && f <= 1) { // NaN too: it compares false with everything
		if name := strings.TrimSpace(getenv(envSampler)); ratioSampler(name) {
			return 0, envError(envSamplerArg, "%q is not a number between 0 and 1 (the ratio of %s=%s)", arg, envSampler, name)
		}
		return 0, envError(envSamplerArg, "%q is not a number between 0 and 1", arg)
	}
	return f, nil
}

// envSamplerOf reads OTEL_TRACES_SAMPLER and its argument as OpenTelemetry
// defines them. The argument of a ratio sampler defaults to 1; a bad one
// fails with any sampler.
func envSamplerOf(getenv func(string) string) (sdktrace.Sampler, string, error) {
	name := strings.TrimSpace(getenv(envSampler))
	var sampler sdktrace.Sampler
	switch name {
	case "", "parentbased_always_on":
		sampler, name = sdktrace.ParentBased(sdktrace.AlwaysSample()), "parentbased_always_on"
	case "always_on":
		sampler = sdktrace.AlwaysSample()
	case "always_off":
		sampler = sdktrace.NeverSample()
	case "parentbased_always_off":
		sampler = sdktrace.ParentBased(sdktrace.NeverSample())
	case "traceidratio", "parentbased_traceidratio":
	case "jaeger_remote", "parentbased_jaeger_remote", "xray":
		return nil, "", envError(envSampler, "%q needs a remote sampling service, which tracingfx does not support", name)
	default:
		return nil, "", envError(envSampler, "%q is not always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
	}
	// The variable after its sampler, as in the table of docs/configuration.md.
	f, err := samplerArg(getenv)
	if err != nil {
		return nil, "", err
	}
	if sampler != nil {
		return sampler, name, nil
	}
	desc := name + " " + strconv.FormatFloat(f, 'g', -1, 64)
	if name == "traceidratio" {
		return sdktrace.TraceIDRatioBased(f), desc, nil
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(f)), desc, nil
}

// knownPropagators are the names autoprop knows.
const knownPropagators = "tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace or none"

// readPropagators: OTEL_PROPAGATORS, else W3C TraceContext and Baggage.
func (s *settings) readPropagators(getenv func(string) string) error {
	raw := strings.TrimSpace(getenv(envPropagators))
	if raw == "" {
		s.propagator, s.propagators = Propagator(), "tracecontext,baggage"
		return nil
	}
	names := strings.Split(raw, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	p, err := autoprop.TextMapPropagator(names...)
	if err != nil {
		return envError(envPropagators, "%q: %v (known: %s)", raw, err, knownPropagators)
	}
	s.propagator, s.propagators = p, strings.Join(names, ",")
	return nil
}

// readBatch fills the batch settings that Config leaves at zero from
// OTEL_BSP_* (milliseconds and counts), then checks them together.
func (s *settings) readBatch(getenv func(string) string) error {
	ints := []struct {
		name, field string
		to          *int
	}{
		{envBSPMaxQueueSize, "Batch.MaxQueueSize", &s.Batch.MaxQueueSize},
		{envBSPMaxExportBatch, "Batch.MaxExportBatchSize", &s.Batch.MaxExportBatchSize},
	}
	for _, v := range ints {
		n, err := positiveInt(getenv, v.name)
		if err != nil {
			return err
		}
		s.override(getenv, v.name, v.field, *v.to != 0)
		if *v.to == 0 {
			*v.to = n
		}
	}
	durations := []struct {
		name, field string
		to          *time.Duration
	}{
		{envBSPScheduleDelay, "Batch.ScheduleDelay", &s.Batch.ScheduleDelay},
		{envBSPExportTimeout, "Batch.ExportTimeout", &s.Batch.ExportTimeout},
	}
	for _, v := range durations {
		d, err := positiveMillis(getenv, v.name)
		if err != nil {
			return err
		}
		s.override(getenv, v.name, v.field, *v.to != 0)
		if *v.to == 0 {
			*v.to = d
		}
	}
	if s.Batch.MaxExportBatchSize > 0 && s.Batch.MaxQueueSize > 0 && s.Batch.MaxExportBatchSize > s.Batch.MaxQueueSize {
		return bad("Batch.MaxExportBatchSize", "%d is larger than Batch.MaxQueueSize %d (with %s and %s applied)",
			s.Batch.MaxExportBatchSize, s.Batch.MaxQueueSize, envBSPMaxExportBatch, envBSPMaxQueueSize)
	}
	return nil
}

// positiveInt reads a variable that must be a whole number above 0 (0 when unset).
func positiveInt(getenv func(string) string, name string) (int, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, envError(name, "%q is not a whole number above 0", v)
	}
	return n, nil
}

// maxMillis is the most milliseconds a time.Duration holds (about 292
// years). The SDK and the OTLP exporters multiply these variables by
// time.Millisecond without a check: a larger value wraps to a negative
// duration (a batch timer that fires at once, for ever: the idle process
// spins a core; an export bound that is off).
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// positiveMillis reads a variable of milliseconds above 0 (0 when unset).
func positiveMillis(getenv func(string) string, name string) (time.Duration, error) {
	n, err := positiveInt(getenv, name)
	if err != nil {
		return 0, err
	}
	if int64(n) > maxMillis {
		return 0, envError(name, "%d milliseconds is more than a duration holds (at most %d, about 292 years)", n, maxMillis)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// checkExportTimeouts checks the exporters' own timeout variables, which
// they read themselves: one that does not parse is ignored by them with a
// log line, and 0, a negative or an overflowing one (which wraps to a
// negative duration) turns their bound of an export off.
func checkExportTimeouts(getenv func(string) string) error {
	for _, name := range []string{envTimeout, envTracesTimeout, envLogsTimeout} {
		if v := getenv(name); v != strings.TrimSpace(v) {
			return envError(name, "%q has spaces around it, which the exporter does not read", v)
		}
		if _, err := positiveMillis(getenv, name); err != nil {
			return err
		}
	}
	return nil
}

// readLogsExporter: the log bridge exports over OTLP unless
// OTEL_LOGS_EXPORTER=none.
func (s *settings) readLogsExporter(getenv func(string) string) error {
	switch v := strings.TrimSpace(getenv(envLogsExporter)); v {
	case "", ExporterOTLP:
		s.exportLogs = true
	case ExporterNone:
	default:
		return envError(envLogsExporter, "%q is not otlp or none (the log bridge sends OTLP; the app's own logger already writes the console)", v)
	}
	return nil
}
