package lockfx

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(redistest.ForExamples(m)) }

// mustNew is New for a test, which stops the Locker when the test ends
// (before the client it was given is closed, when that was made first):
// a give-back still trying then, as one may well be after a test that
// loses answers, would otherwise outlive the test and fail goleak's check
// of the package (it did, in CI, with a Cluster client).
func mustNew(t testing.TB, rdb redis.UniversalClient, cfg Config, opts ...Option) *Locker {
	t.Helper()
	l, err := New(rdb, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Stop(ctx); err != nil {
			t.Errorf("the Locker's give-backs were still running 10 s after Stop: %v", err)
		}
	})
	return l
}

func newLocker(t *testing.T, cfg Config, opts ...Option) *Locker {
	t.Helper()
	srv := redistest.Start(t)
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = redistest.Prefix(t)
	}
	l := mustNew(t, c, cfg, opts...)
	return l
}

// 50 goroutines contend for one lock; a shared counter never sees two holders.
func TestMutualExclusion_FiftyWay(t *testing.T) {
	t.Parallel()
	l := newLocker(t, Config{TTL: 5 * time.Second, Attempts: 1000, WaitTimeout: 30 * time.Second, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	var holders, maxHolders, done atomic.Int64
	var tokens sync.Map
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.WithLock(context.Background(), "account-42", func(ctx context.Context, token int64) error {
				if _, dup := tokens.LoadOrStore(token, true); dup {
					t.Errorf("fencing token %d handed out twice", token)
				}
				n := holders.Add(1)
				if n > maxHolders.Load() {
					maxHolders.Store(n)
				}
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				done.Add(1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if maxHolders.Load() != 1 || done.Load() != 50 {
		t.Fatalf("max simultaneous holders %d, completed %d", maxHolders.Load(), done.Load())
	}
}

func TestReleaseByNonOwnerRefused(t *testing.T) {
	t.Parallel()
	l := newLocker(t, Config{TTL: 200 * time.Millisecond})
	ctx := context.Background()
	first, err := l.Acquire(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	// The lease runs out; someone else takes the lock; the first holder
	// was told before, and its release must not free the second's lock.
	var second *Lock
	deadline := time.Now().Add(5 * time.Second)
	for second == nil && time.Now().Before(deadline) {
		second, _ = l.Acquire(ctx, "r")
	}
	if second == nil || second.Token <= first.Token {
		t.Fatalf("second holder %+v (first token %d)", second, first.Token)
	}
	if err := first.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("the first holder's Err once another holds the lock = %v, want ErrLockLost", err)
	}
	if err := first.Release(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("stale release = %v, want ErrLockLost", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatalf("owner release: %v", err)
	}
}

func TestAutoRenewKeepsLockPastTTL_CrashedHolderExpires(t *testing.T) {
	t.Parallel()
	// 400ms: renewals answer within TTL/5 even on a loaded 2-core machine.
	l := newLocker(t, Config{TTL: 400 * time.Millisecond, AutoRenew: true, Attempts: 1})
	ctx := context.Background()
	held, err := l.Acquire(ctx, "renewed")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1600 * time.Millisecond) // four TTLs: renewed all along
	if _, err := l.Acquire(ctx, "renewed"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("renewed lock taken: %v (the holder was told: %v)", err, held.Err())
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A holder that crashes (never releases, never renews) loses the lock
	// at TTL. (150ms was shorter than an acquire's answer on a loaded
	// machine: granted too late, the acquire failed.)
	plain := newLocker(t, Config{TTL: time.Second, Attempts: 1})
	if _, err := plain.Acquire(ctx, "crashed"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := plain.Acquire(ctx, "crashed"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a crashed holder's lock never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The documented span catalogue and metrics for locks, checked on the console
// exporter's output and the registry.
func TestSpansAndMetrics(t *testing.T) {
	t.Parallel()
	spans := obstest.NewSpans(t)
	reg := prometheus.NewRegistry()
	l := newLocker(t, Config{TTL: time.Second, Attempts: 3, Backoff: time.Millisecond}, WithRegisterer(reg), WithTracerProvider(spans.Tracer()))
	ctx := context.Background()
	held, err := l.Acquire(ctx, "card-4242")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "card-4242"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second acquire: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var ok, failed, released *tracingfx.ConsoleSpan
	all := spans.All(t)
	for i := range all {
		s := &all[i]
		switch {
		case s.Name == "lock.acquire" && s.Attributes[AttrAcquired] == true:
			ok = s
		case s.Name == "lock.acquire":
			failed = s
		case s.Name == "lock.release":
			released = s
		}
	}
	if ok == nil || failed == nil || released == nil {
		t.Fatalf("spans: %+v", all)
	}
	for _, s := range []*tracingfx.ConsoleSpan{ok, failed, released} {
		if s.Attributes["redisfx.plugin"] != "locks" || s.Attributes[AttrKey] != plugintrace.Redacted || s.Attributes["db.system"] != "redis" || s.Attributes["redisfx.duration_ms"] == nil {
			t.Fatalf("%s attributes %v", s.Name, s.Attributes)
		}
	}
	if ok.Attributes["db.operation"] != "SET" || ok.Attributes[AttrTTL] != float64(1000) || ok.Attributes[AttrRetryCount] != float64(0) || obstest.EventNames(*ok)[0] != "lock.acquired" {
		t.Fatalf("acquired span %+v", ok)
	}
	if failed.Status.Code != "ERROR" || failed.Status.Message != "Failed to acquire lock" || failed.Attributes[AttrRetryCount] != float64(2) {
		t.Fatalf("failed span %+v", failed)
	}
	ev := obstest.EventNames(*failed)
	if ev[0] != "lock.retry" || ev[1] != "lock.retry" || ev[2] != "lock.timeout" {
		t.Fatalf("failed span events %v", ev)
	}
	if e := obstest.EventNames(*released); len(e) == 0 || e[0] != "lock.released" {
		t.Fatalf("release events %v", e)
	}
	for name, want := range map[string]float64{"lock_acquisitions_total": 1, "lock_attempts_total": 4, "lock_timeouts_total": 1, "locks_active": 0} {
		if got := obstest.Value(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if obstest.Value(t, reg, "lock_wait_seconds") != 2 || obstest.Value(t, reg, "lock_wait_duration_seconds") != 2 {
		t.Error("wait histograms did not observe both acquires")
	}
}

// Every lock.acquire that ends without the lock has the status the
// tracing spec gives a lock not acquired, ERROR "Failed to acquire lock",
// whatever the reason: here Redis did not answer within WaitTimeout. The
// error itself is the exception event. (Found by an adversary: the status
// message was the Go error's text.)
func TestSpans_AcquireEndingInAStoreError_StatusFailedToAcquireLock(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	spans := obstest.NewSpans(t)
	l := lockerOn(t, srv.Addr(), Config{TTL: time.Second, Attempts: 1, WaitTimeout: 200 * time.Millisecond}, WithTracerProvider(spans.Tracer()))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	ctx := context.Background()
	srv.Pause(ctx, time.Second)
	_, err := l.Acquire(ctx, "hung")
	if err == nil || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire from a paused Redis = %v, want a store error", err)
	}
	notAcquiredSpan(t, spans, err)
}

// ...and the exception event is the very error Acquire returned, also for
// a reply error and a refusal by the circuit breaker (it was the error
// before Acquire wrapped it; found by an adversary).
func TestSpans_AcquireEndingInAReplyErrorOrAnOpenBreaker_ExceptionIsTheReturnedError(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	t.Run("reply error", func(t *testing.T) {
		spans := obstest.NewSpans(t)
		l := lockerOn(t, srv.Addr(), Config{TTL: time.Second, Attempts: 1}, WithTracerProvider(spans.Tracer()))
		t.Cleanup(func() { _ = l.Stop(context.Background()) })
		if err := srv.Client().HSet(ctx, mustKeys(t, l, "wrongtype").lock, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := l.Acquire(ctx, "wrongtype")
		if err == nil || errors.Is(err, ErrNotAcquired) {
			t.Fatalf("Acquire = %v, want a store error", err)
		}
		notAcquiredSpan(t, spans, err)
	})
	t.Run("breaker open", func(t *testing.T) {
		spans := obstest.NewSpans(t)
		proxy := faultproxy.Start(t, srv.Addr())
		c, err := storefx.New("default", storefx.Config{URL: "redis://" + proxy.Addr(),
			// The 30 ms deadlines below count once they waited ProbeTimeout.
			Breaker: storefx.BreakerConfig{ProbeInterval: time.Hour, ProbeTimeout: 10 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		l := mustNew(t, c, Config{TTL: time.Second, Attempts: 1, WaitTimeout: 100 * time.Millisecond}, WithTracerProvider(spans.Tracer()))
		proxy.SetMode(faultproxy.Blackhole)
		for i := 0; i < 20 && c.Breaker().State == storefx.BreakerClosed; i++ {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			_ = c.Get(cctx, "x").Err()
			cancel()
		}
		_, err = l.Acquire(ctx, "open")
		if !errors.Is(err, storefx.ErrCircuitOpen) {
			t.Fatalf("Acquire = %v, want ErrCircuitOpen (breaker %+v)", err, c.Breaker())
		}
		notAcquiredSpan(t, spans, err)
	})
}

// notAcquiredSpan checks the one lock.acquire span of an Acquire that
// returned err without the lock: status ERROR "Failed to acquire lock",
// redisfx.error, and err as its exception event.
func notAcquiredSpan(t *testing.T, spans *obstest.Spans, err error) {
	t.Helper()
	got := spans.Named(t, "lock.acquire")
	if len(got) != 1 {
		t.Fatalf("%d lock.acquire spans", len(got))
	}
	s := got[0]
	if s.Attributes[AttrAcquired] != false || s.Status.Code != "ERROR" || s.Status.Message != "Failed to acquire lock" || s.Attributes["redisfx.error"] != true {
		t.Fatalf("lock.acquire not acquired (Acquire = %v): acquired=%v status %s %q, redisfx.error %v; want ERROR \"Failed to acquire lock\"",
			err, s.Attributes[AttrAcquired], s.Status.Code, s.Status.Message, s.Attributes["redisfx.error"])
	}
	var exception string
	for _, e := range s.Events {
		if e.Name == "exception" {
			exception, _ = e.Attributes["exception.message"].(string)
		}
	}
	if exception != err.Error() {
		t.Fatalf("exception event message %q, want the error %q", exception, err)
	}
}

// A lock name is written into the spans as Config.KeyAttribute says:
// redacted by default, as a digest with HashKey, as given with RawKey; a
// store error names the lock the same way.
func TestKeyAttribute(t *testing.T) {
	t.Parallel()
	const name = "card:4242424242424242"
	hash := plugintrace.HashKey([]byte("secret"))
	for _, c := range []struct {
		policy plugintrace.KeyAttribute
		want   string
	}{{plugintrace.KeyAttribute{}, plugintrace.Redacted}, {hash, hash.Value(name)}, {plugintrace.RawKey(), name}} {
		spans := obstest.NewSpans(t)
		l := newLocker(t, Config{KeyAttribute: c.policy}, WithTracerProvider(spans.Tracer()))
		lock, err := l.Acquire(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		all := spans.All(t)
		if len(all) != 2 {
			t.Fatalf("%s: %d spans, want lock.acquire and lock.release", c.policy, len(all))
		}
		for _, s := range all {
			if s.Attributes[AttrKey] != c.want {
				t.Errorf("%s: %s has %s=%v, want %q", c.policy, s.Name, AttrKey, s.Attributes[AttrKey], c.want)
			}
		}
	}

	// A store error: the message names the lock by its digest.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	l := mustNew(t, rdb, Config{KeyAttribute: hash, Attempts: 1})
	_, err := l.Acquire(context.Background(), name)
	if err == nil || strings.Contains(err.Error(), "4242424242424242") || !strings.Contains(err.Error(), hash.Value(name)) {
		t.Fatalf("store error %v: want the lock's digest, not its name", err)
	}
}

func TestConfigNamesTheOption(t *testing.T) {
	for opt, c := range map[string]Config{"TTL": {TTL: -1}, "KeyPrefix": {KeyPrefix: "app{}:"}} {
		if err := c.Validate(); err == nil || !bytes.Contains([]byte(err.Error()), []byte(opt)) {
			t.Errorf("%s: %v", opt, err)
		}
	}
}

// BenchmarkAcquireRelease is one lock round trip: acquire (1 script call)
// and release (1 script call).
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	c, _ := storefx.New("default", storefx.Config{URL: srv.URL()})
	defer c.Close()
	l := mustNew(b, c, Config{KeyPrefix: redistest.Prefix(b)})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		k, err := l.Acquire(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		_ = k.Release(ctx)
	}
}

// BenchmarkBaseline_RawSetNXDel is the floor of a lock round trip: a bare
// SET NX PX and DEL, without ownership or fencing.
func BenchmarkBaseline_RawSetNXDel(b *testing.B) {
	srv := redistest.Start(b)
	c, _ := storefx.New("default", storefx.Config{URL: srv.URL()})
	defer c.Close()
	ctx := context.Background()
	key := redistest.Prefix(b) + "raw"
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := c.SetNX(ctx, key, "owner", 10*time.Second).Result(); !ok || err != nil {
			b.Fatal(ok, err)
		}
		c.Del(ctx, key)
	}
}

// WaitTimeout bounds an Acquire against a Redis that does not answer, and
// the answer is a store error, not ErrNotAcquired: nothing said the lock
// was held. (Found by an adversary: the payments example answered 503
// card_busy, "another payment holds this card", under both error policies
// when Redis hung, where fail-open must charge and fail-closed answer 500.)
func TestWaitTimeoutBoundsAHangingRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	c, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hung := mustNew(t, c, Config{KeyPrefix: redistest.Prefix(t), WaitTimeout: 200 * time.Millisecond})
	srv.Pause(context.Background(), 3*time.Second)
	began := time.Now()
	if _, err := hung.Acquire(context.Background(), "x"); errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire from a paused Redis = %v, want a store error wrapping context.DeadlineExceeded", err)
	}
	if d := time.Since(began); d > time.Second {
		t.Fatalf("Acquire took %v with WaitTimeout 200ms", d)
	}
	// The client's own ReadTimeout, shorter than WaitTimeout (as with the
	// defaults: 3s against 5s), ends the call with a net timeout, not the
	// context's: the same store error. (Found by an adversary: it was an
	// "i/o timeout" that did not wrap context.DeadlineExceeded.)
	short, err := storefx.New("short", storefx.Config{URL: srv.URL(), ReadTimeout: 100 * time.Millisecond, Breaker: storefx.BreakerConfig{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	slow := mustNew(t, short, Config{KeyPrefix: redistest.Prefix(t), WaitTimeout: 2 * time.Second})
	defer slow.Stop(context.Background())
	if _, err := slow.Acquire(context.Background(), "y"); errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire from a paused Redis, ReadTimeout < WaitTimeout = %v, want a store error wrapping context.DeadlineExceeded", err)
	}
}
