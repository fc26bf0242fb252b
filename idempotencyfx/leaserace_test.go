package idempotencyfx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/internal/redistest"
)

// Found by the idempotency checker: newLease set its timer after starting
// it, so a first renewal that came before the assignment (a lease of
// LockTimeout/3 on a loaded machine) read the timer unsynchronised (a data
// race under -race, a nil timer otherwise). Under -race this test fails on
// that code.
func TestLease_FirstRenewalSeesItsTimer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := newEnv(t, Config{LockTimeout: 12 * time.Millisecond}, srv)
	ctx := context.Background()
	key := e.svc.StoreKey("", "lease-race")
	for i := range 20 {
		owner := randid.Hex(12)
		c, err := e.svc.claimOnce(ctx, key, "fp", owner, false)
		if err != nil || (c.kind != claimNew && c.kind != claimTakeover) {
			t.Fatalf("claim %d: %+v, %v", i, c, err)
		}
		l := e.svc.newLease(key, owner, c.token)
		time.Sleep(30 * time.Millisecond) // a few renewals
		// What fails on the old code is the race detector (or a nil timer
		// panic without -race). Whether the lease survived is not asserted:
		// a 12 ms lease can run out on a starved machine, as documented.
		l.stop()
		if _, err := e.rdb.Del(ctx, key).Result(); err != nil {
			t.Fatal(err)
		}
	}
}
