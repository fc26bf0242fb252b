package storefx_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// testCA writes a CA and a server certificate for 127.0.0.1 into dir.
func testCA(t *testing.T, dir string) (caPool *x509.CertPool, certFile, keyFile, caFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redisfx test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caPool = x509.NewCertPool()
	caPool.AddCert(ca)
	return caPool, write("server.crt", "CERTIFICATE", der), write("server.key", "EC PRIVATE KEY", keyDER), write("ca.crt", "CERTIFICATE", caDER)
}

// rediss:// against a TLS-only redis-server with a test CA, and an ACL user
// with a password.
func TestTLSAndACLUser(t *testing.T) {
	t.Parallel()
	pool, cert, key, ca := testCA(t, t.TempDir())
	srv := redistest.StartPrivate(t, redistest.WithArgs("--port", "0", "--tls-port", "{port}",
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
		"--user", "default", "off", "--user", "payments", "on", ">s3cret-pw", "~*", "&*", "+@all"))
	ctx := context.Background()

	c, err := storefx.New("default", storefx.Config{URL: "rediss://payments:s3cret-pw@" + srv.Addr(),
		TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatalf("over TLS as an ACL user: %v", err)
	}
	if who := c.Do(ctx, "ACL", "WHOAMI").Val(); who != "payments" {
		t.Fatalf("ACL WHOAMI = %v", who)
	}

	// An untrusted certificate is refused.
	bad, _ := storefx.New("default", storefx.Config{URL: "rediss://payments:s3cret-pw@" + srv.Addr(),
		TLS: &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "127.0.0.1"}})
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted server accepted: %v", err)
	}
	// A wrong password is refused, and the error does not repeat it.
	wrong, _ := storefx.New("default", storefx.Config{URL: "rediss://payments:wrong-pw-123@" + srv.Addr(),
		TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil || strings.Contains(err.Error(), "wrong-pw-123") {
		t.Fatalf("wrong password: %v", err)
	}
}
