package plugintrace_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redisfx/redisfx/plugintrace"
)

const pan = "card:4242424242424242"

func TestKeyAttributePolicies(t *testing.T) {
	unkeyed := sha256.Sum256([]byte(pan))
	m := hmac.New(sha256.New, []byte("s3cret"))
	m.Write([]byte(pan))
	keyed := m.Sum(nil)
	for _, c := range []struct {
		p          plugintrace.KeyAttribute
		name, want string
	}{
		{plugintrace.KeyAttribute{}, "redact", plugintrace.Redacted},
		{plugintrace.RedactKey(), "redact", plugintrace.Redacted},
		{plugintrace.RawKey(), "raw", pan},
		{plugintrace.HashKey(nil), "sha256", "sha256:" + hex.EncodeToString(unkeyed[:8])},
		{plugintrace.HashKey([]byte("s3cret")), "hmac-sha256", "hmac-sha256:" + hex.EncodeToString(keyed[:8])},
	} {
		if got := c.p.Value(pan); got != c.want {
			t.Errorf("%s: Value = %q, want %q", c.name, got, c.want)
		}
		if c.p.String() != c.name || strings.Contains(c.p.String(), "s3cret") {
			t.Errorf("String = %q, want %q", c.p.String(), c.name)
		}
	}
	if plugintrace.HashKey([]byte("a")).Value(pan) == plugintrace.HashKey([]byte("b")).Value(pan) {
		t.Error("two secrets give the same digest")
	}
	if got := plugintrace.RawKey().Quote(pan); got != `"`+pan+`"` {
		t.Errorf("raw Quote = %s", got)
	}
	if got := plugintrace.RedactKey().Quote(pan); got != plugintrace.Redacted {
		t.Errorf("redact Quote = %s", got)
	}
}

// HashKey copies its secret: changing the caller's slice later changes
// nothing.
func TestHashKeyCopiesTheSecret(t *testing.T) {
	secret := []byte("s3cret")
	p := plugintrace.HashKey(secret)
	before := p.Value(pan)
	secret[0] = 'X'
	if p.Value(pan) != before {
		t.Fatal("the policy shares the caller's secret")
	}
}

func TestSetKey(t *testing.T) {
	rec, tp := record(t)
	_, sp := plugintrace.Start(context.Background(), tp, "cache", "cache.delete", "DEL")
	sp.SetKey("redisfx.cache.key", plugintrace.HashKey(nil), "a", "b")
	sp.Finish(nil)
	got := attrs(rec.Ended()[0])["redisfx.cache.key"].AsString()
	want := plugintrace.HashKey(nil).Value("a") + "," + plugintrace.HashKey(nil).Value("b")
	if got != want {
		t.Fatalf("redisfx.cache.key = %q, want %q", got, want)
	}

	// An unsampled span is not given the attribute, and a nil span is fine.
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = never.Shutdown(context.Background()) })
	_, sp = plugintrace.Start(context.Background(), never, "cache", "cache.get", "GET")
	// (HMAC-SHA-256 alone allocates more than one; the variadic slice may escape.)
	hash := plugintrace.HashKey([]byte("s"))
	if n := testing.AllocsPerRun(50, func() { sp.SetKey("k", hash, pan) }); n > 1 {
		t.Errorf("%v allocations on an unsampled span: the key was hashed", n)
	}
	if n := testing.AllocsPerRun(50, func() { _ = hash.Value(pan) }); n <= 1 {
		t.Errorf("hashing makes %v allocations: the check above proves nothing", n)
	}
	var none *plugintrace.Span
	none.SetKey("k", plugintrace.RawKey(), pan)
}
