package tracingfx

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"

	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// errShuttingDown ends the exports and dials still running when
// Provider.Shutdown returns.
var errShuttingDown = errors.New("tracingfx: the provider is shut down")

// spanExporter is the OTLP span exporter with the export guards: valid
// UTF-8 (validutf8.go) and the end at shutdown. It tells gate (the
// dropGate in front of its batch processor) how many spans it received.
//
// Protobuf checks every string as it encodes the batch and fails the
// export before anything is sent, so the strings are only looked at, and
// repaired, when an export fails: the batches that succeed pay nothing.
type spanExporter struct {
	sdktrace.SpanExporter
	net  *netGate
	gate *dropGate
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.gate.exported(len(spans))
	return export(ctx, e.net, spans, e.SpanExporter.ExportSpans, validSpans)
}

// logExporter is the OTLP log exporter with the same guards.
type logExporter struct {
	sdklog.Exporter
	net *netGate
}

// Export implements sdklog.Exporter.
func (e *logExporter) Export(ctx context.Context, records []sdklog.Record) error {
	return export(ctx, e.net, records, e.Exporter.Export, validRecords)
}

// export sends batch within the gate's bound; a batch that failed is sent
// again repaired when valid finds invalid UTF-8 in it.
func export[T any](ctx context.Context, g *netGate, batch []T, send func(context.Context, []T) error, valid func([]T) []T) error {
	ctx, release := g.bound(ctx)
	defer release()
	err := send(ctx, batch)
	if err != nil {
		if repaired := valid(batch); repaired != nil {
			err = send(ctx, repaired)
		}
	}
	return err
}

// netGate dials every connection of a provider's OTLP exporters. close
// refuses new dials, ends those in progress and the exports (with their
// retry pauses), and closes every connection: once it returned, nothing
// more reaches the backend, whatever the SDK's processors still try (they
// outlive their Shutdown's deadline).
type netGate struct {
	ctx    context.Context // ends the dials and exports in progress
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	dials  sync.WaitGroup
}

func newNetGate() *netGate {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &netGate{ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
}

// bound is ctx, also ended by close; call release when done.
func (g *netGate) bound(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(g.ctx, func() { cancel(context.Cause(g.ctx)) })
	return ctx, func() { stop(); cancel(nil) }
}

func (g *netGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, errShuttingDown
	}
	g.dials.Add(1)
	g.mu.Unlock()
	defer g.dials.Done()
	ctx, release := g.bound(ctx)
	defer release()
	c, err := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		_ = c.Close()
		return nil, errShuttingDown
	}
	g.conns[c] = struct{}{}
	return &gatedConn{Conn: c, gate: g}, nil
}

// close returns once no connection is open and none can be dialed.
func (g *netGate) close() {
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		_ = c.Close()
	}
	clear(g.conns)
	g.mu.Unlock()
	g.cancel(errShuttingDown)
	g.dials.Wait()
}

// httpClient is an OTLP/HTTP client whose connections the gate dials. The
// exporter bounds a request with its client's Timeout, and its TLS follows
// the certificate variables, as the exporter's own client's would.
func (g *netGate) httpClient(signal string) (*http.Client, error) {
	ms, _ := strconv.Atoi(cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_TIMEOUT"), os.Getenv("OTEL_EXPORTER_OTLP_TIMEOUT"), "10000"))
	tlsConf, err := tlsFromEnv(signal)
	return &http.Client{Timeout: time.Duration(ms) * time.Millisecond, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
		DialContext: g.dial, TLSClientConfig: tlsConf, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second, IdleConnTimeout: 90 * time.Second}}, err
}

// tlsFromEnv reads OTEL_EXPORTER_OTLP_[<SIGNAL>_]CERTIFICATE (the roots),
// CLIENT_CERTIFICATE and CLIENT_KEY (PEM files); the signal's own variable
// wins over the generic one. Nil when none is set: the system's roots.
func tlsFromEnv(signal string) (*tls.Config, error) {
	var names [3]string
	var pems [3][]byte // CA, client certificate, client key
	var err error
	for i, v := range []string{"CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY"} {
		names[i] = "OTEL_EXPORTER_OTLP_" + signal + "_" + v
		if os.Getenv(names[i]) == "" {
			names[i] = "OTEL_EXPORTER_OTLP_" + v
		}
		if file := os.Getenv(names[i]); file != "" && err == nil {
			if pems[i], err = os.ReadFile(file); err != nil {
				err = configError(names[i], "%v", err)
			}
		}
	}
	ca, cert, key := pems[0], pems[1], pems[2]
	if err != nil || ca == nil && cert == nil && key == nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != nil {
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(ca) {
			return nil, configError(names[0], "holds no PEM certificate")
		}
	}
	if cert != nil || key != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, configError(names[1], "with %s: %v", names[2], err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

func (g *netGate) grpcDialer() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return g.dial(ctx, "tcp", addr) })
}

// gatedConn leaves the gate's set when closed.
type gatedConn struct {
	net.Conn
	gate *netGate
}

// Close implements net.Conn.
func (c *gatedConn) Close() error {
	c.gate.mu.Lock()
	delete(c.gate.conns, c.Conn)
	c.gate.mu.Unlock()
	return c.Conn.Close()
}
