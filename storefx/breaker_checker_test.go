package storefx_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/idemcheck"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// breakerCheckerSeeds once failed; each runs every time, before a fresh one.
var breakerCheckerSeeds = []uint64{
	// With the breaker counting the caller's ended contexts (issue 35 item
	// 2), it opened within 10 ms.
	35,
}

// The breaker checker: seeded callers of a healthy private Redis mix normal
// commands and pipelines with contexts spent before the call, cancelled
// before or during it, and deadlines shorter than ProbeTimeout that end
// commands Redis is still serving (BLPOP). Invariant: the breaker of a
// server that answers every command it receives never opens, never
// refuses. REDISFX_CHECK_DURATION and REDISFX_CHECK_SEED as for the other
// checkers.
func TestBreakerChecker(t *testing.T) {
	t.Parallel()
	seeds := idemcheck.Seeds(t, breakerCheckerSeeds)
	for i, seed := range seeds {
		d := idemcheck.Duration(t, 2*time.Second)
		if i < len(seeds)-1 {
			d = min(d, time.Second)
		}
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			srv := redistest.StartPrivate(t)
			c, _ := newBreakerClient(t, srv.Addr(), storefx.BreakerConfig{Failures: 3, ProbeTimeout: 2 * time.Second})
			deadline := time.Now().Add(d)
			var wg sync.WaitGroup
			for w := range 6 {
				rng := rand.New(rand.NewPCG(seed, uint64(w)))
				wg.Go(func() {
					for time.Now().Before(deadline) && c.Breaker().Opened == 0 {
						breakerCheckerCall(c, rng)
					}
				})
			}
			wg.Wait()
			if st := c.Breaker(); st.Opened != 0 || st.Refused != 0 {
				t.Fatalf("seed %d: the breaker of a Redis that answered every command opened: %+v; replay with REDISFX_CHECK_SEED=%d", seed, st, seed)
			}
		})
	}
}

// breakerCheckerCall makes one call drawn from rng.
func breakerCheckerCall(c *storefx.Client, rng *rand.Rand) {
	key := "k" + strconv.Itoa(rng.IntN(8))
	timeout := time.Second
	n := rng.IntN(100)
	switch {
	case n < 10: // deadline spent before the call
		timeout = -time.Millisecond
	case n < 20: // a deadline that ends a BLPOP Redis still serves
		timeout = time.Duration(1+rng.IntN(50)) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch {
	case n < 20 && n >= 10:
		_ = c.BLPop(ctx, 100*time.Millisecond, "empty:"+key).Err()
		return
	case n < 30: // cancelled before the call
		cancel()
	case n < 45: // cancelled during it
		time.AfterFunc(time.Duration(rng.IntN(2000))*time.Microsecond, cancel)
	}
	if rng.IntN(4) == 0 {
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, key)
			p.Get(ctx, key)
			return nil
		})
		return
	}
	_ = c.Incr(ctx, key).Err()
}
