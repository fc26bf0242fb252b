package tracingfx

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx"
)

// testCA issues certificates; pem writes them to dir.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, der: der}
}

// issue returns a PEM certificate and key for 127.0.0.1, signed by ca.
func (ca *testCA) issue(t *testing.T, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func (ca *testCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A collector behind a private CA that requires a client certificate: the
// OTLP/HTTP exporter trusts OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE (over
// the generic variable, which names another CA) and presents the client
// certificate of OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE/_CLIENT_KEY.
func TestOTLP_HTTPS_CertificateVariables(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	serverCert, serverKey := ca.issue(t, x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.issue(t, x509.ExtKeyUsageClientAuth)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(ca.cert)
	rc := &receiver{}
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(rc.serve))
	rc.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: clients, ClientAuth: tls.RequireAndVerifyClientCert}
	rc.StartTLS()
	defer rc.Close()

	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", writeFile(t, "other.pem", other.pem()))
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", writeFile(t, "ca.pem", ca.pem()))
	t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", writeFile(t, "client.pem", clientCert))
	t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", writeFile(t, "client.key", clientKey))
	t.Setenv(envLogsExporter, "none")
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: rc.URL}})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := NewTracingService(p.Tracer).StartSpan(context.Background(), "over-tls")
	sp.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if spanNamed(rc.got(), "over-tls") == nil {
		t.Fatal("the span did not reach the collector behind the private CA")
	}
}

// A file that cannot be read or parsed fails start-up naming its variable,
// over HTTP and gRPC.
func TestOTLP_HTTPS_BadCertificateVariables(t *testing.T) {
	ca := newTestCA(t)
	cert, key := ca.issue(t, x509.ExtKeyUsageClientAuth)
	garbage := writeFile(t, "garbage.pem", []byte("not a certificate"))
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"OTEL_EXPORTER_OTLP_CERTIFICATE", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(t.TempDir(), "missing.pem")}},
		{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": garbage}},
		{"OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE", map[string]string{
			"OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE": garbage, "OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY": writeFile(t, "k.pem", key)}},
		{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": writeFile(t, "c.pem", cert)}}, // no key
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
				p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Protocol: protocol, Endpoint: "https://127.0.0.1:1"}})
				if err == nil {
					_ = p.Shutdown(context.Background())
					t.Fatalf("%s: started", protocol)
				}
				var ce *redisfx.ConfigError
				if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.name+":") {
					t.Fatalf("%s: error %v does not name %s", protocol, err, c.name)
				}
			}
		})
	}
}
