package idempotencyfx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// Issue 18, item 1: a Config literal that leaves DefaultTTL out gets the
// default (24h), like every other zero field; it used to mean "never
// expires".
func TestConfig_ZeroDefaultTTL_IsTheDefault(t *testing.T) {
	t.Parallel()
	s, err := Config{KeyPrefix: "tenant:", Scope: tenantScope}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if s.DefaultTTL != DefaultTTL {
		t.Fatalf("DefaultTTL left zero = %v, want the default %v", s.DefaultTTL, DefaultTTL)
	}
}

// The record written under a Config without DefaultTTL expires after 24h.
func TestZeroDefaultTTL_RecordExpiresIn24h(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	svc, err := New(client, Config{KeyPrefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	ctx := context.Background()
	if _, _, err := svc.Do(ctx, "k", "fp", func(context.Context) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	ttl := client.PTTL(ctx, svc.StoreKey("", "k")).Val()
	if ttl <= 23*time.Hour+59*time.Minute || ttl > 24*time.Hour {
		t.Fatalf("record TTL %v, want 24h", ttl)
	}
}

// "Never expires" is the explicit NeverExpire: the record has no TTL, and
// Start warns. Any other negative TTL is refused.
func TestNeverExpire_PersistsAndWarns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{DefaultTTL: NeverExpire}, nil)
	if e.svc.Config().DefaultTTL != NeverExpire {
		t.Fatalf("Config().DefaultTTL = %v, want NeverExpire", e.svc.Config().DefaultTTL)
	}
	if e.logs.FilterMessageSnippet("never expire").Len() == 0 {
		t.Fatal("no warning for NeverExpire")
	}
	e.post("/payments", "forever", `{}`)
	if ttl := e.rdb.PTTL(context.Background(), e.svc.StoreKey("", "forever")).Val(); ttl != -1*time.Nanosecond {
		t.Fatalf("TTL %v, want none", ttl)
	}
	e.rdb.Del(context.Background(), e.svc.StoreKey("", "forever"))
	if err := (Config{DefaultTTL: NeverExpire - 1}).Validate(); err == nil {
		t.Fatal("a negative DefaultTTL other than NeverExpire was accepted")
	}
}

// A LockTimeout under a second is accepted (tests use them) but Start
// warns that a renewal delayed past a third of it lets a duplicate run
// while the handler still runs (an adversary ran a 1.5 s handler 12 times
// with a 10 ms lease on a loaded machine); the default is not warned about.
func TestShortLockTimeout_StartWarns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	short := newEnv(t, Config{LockTimeout: 300 * time.Millisecond}, srv)
	if short.logs.FilterMessageSnippet("LockTimeout is shorter than 1s").Len() != 1 {
		t.Fatal("no warning for a 300ms LockTimeout")
	}
	usual := newEnv(t, Config{}, srv)
	if usual.logs.FilterMessageSnippet("LockTimeout is shorter").Len() != 0 {
		t.Fatal("the default LockTimeout was warned about")
	}
}
