package idempotencyfx

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/idemscript"
)

// afterClaim is a go-redis hook that calls fn once, after the first claim
// script returned, before its caller sees the reply.
type afterClaim struct {
	done atomic.Bool
	fn   func(ctx context.Context)
}

func (h *afterClaim) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *afterClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if cmd.Name() == "evalsha" && len(args) > 1 && fmt.Sprint(args[1]) == idemscript.Claim.Hash() && h.done.CompareAndSwap(false, true) {
			h.fn(ctx)
		}
		return err
	}
}

// Fencing tokens follow the claims, not the start of the work: an owner
// whose record is lost between its claim and the start of its work (here
// the operator's Delete) starts after the next owner has run, and its token
// is the lower one, so downstream writes refuse it. The idempotency
// checker once ordered tokens by the start of the work and took this for a
// violation. The next owner is another process: a duplicate in the same
// process would wait for the first's claim (see flock).
func TestFencingToken_FollowsTheClaims_NotTheStartOfTheWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	other, err := New(e.rdb, e.svc.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	var nextToken int64
	var nextEnded time.Time
	hook := &afterClaim{fn: func(ctx context.Context) {
		if _, err := e.svc.Delete(ctx, "", "k"); err != nil {
			t.Error(err)
		}
		_, _, err := other.Do(ctx, "k", "fp", func(ctx context.Context) ([]byte, error) {
			nextToken = FencingToken(ctx)
			return []byte("next"), nil
		})
		if err != nil {
			t.Error(err)
		}
		nextEnded = time.Now()
	}}
	e.rdb.AddHook(hook)
	var lateToken int64
	var lateStarted time.Time
	_, _, err = e.svc.Do(context.Background(), "k", "fp", func(ctx context.Context) ([]byte, error) {
		lateStarted, lateToken = time.Now(), FencingToken(ctx)
		return []byte("late"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !hook.done.Load() {
		t.Fatal("no claim script was seen")
	}
	if !lateStarted.After(nextEnded) || lateToken <= 0 || lateToken >= nextToken {
		t.Fatalf("the late work started %v after the next owner's ended, with token %d (next owner's %d): want it after, with the lower token",
			lateStarted.Sub(nextEnded), lateToken, nextToken)
	}
	rec, err := e.svc.Get(context.Background(), "", "k")
	if err != nil || rec == nil || rec.FencingToken != nextToken || rec.Response == nil || string(rec.Response.Body) != "next" {
		t.Fatalf("the record must keep the next owner's outcome: %+v %v", rec, err)
	}
}
