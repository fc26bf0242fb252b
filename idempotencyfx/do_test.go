package idempotencyfx

import (
	"context"
	"errors"
	"testing"

	"github.com/redisfx/redisfx"
)

func TestDo_RunsOnceAndReplaysResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	ctx := context.Background()
	runs := 0
	fn := func(ctx context.Context) ([]byte, error) {
		runs++
		if FencingToken(ctx) <= 0 {
			t.Errorf("fencing token %d", FencingToken(ctx))
		}
		return []byte("receipt-1"), nil
	}
	out, replayed, err := e.svc.Do(ctx, "msg-1", "fp", fn)
	if err != nil || replayed || string(out) != "receipt-1" {
		t.Fatalf("first Do = %q %v %v", out, replayed, err)
	}
	out, replayed, err = e.svc.Do(ctx, "msg-1", "fp", fn)
	if err != nil || !replayed || string(out) != "receipt-1" || runs != 1 {
		t.Fatalf("second Do = %q %v %v (runs %d)", out, replayed, err, runs)
	}
	_, _, err = e.svc.Do(ctx, "msg-1", "other", fn)
	var mismatch *IdempotencyFingerprintMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("different fingerprint: %v", err)
	}
	var base *redisfx.BaseError
	if !errors.As(err, &base) || base.Code != CodeKeyReused {
		t.Fatalf("errors.As to the base error: %v", err)
	}
}

func TestDo_ErrorRecordsFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	ctx := context.Background()
	boom := errors.New("downstream refused")
	if _, _, err := e.svc.Do(ctx, "m", "fp", func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the function's error", err)
	}
	_, _, err := e.svc.Do(ctx, "m", "fp", func(context.Context) ([]byte, error) { return nil, nil })
	var failed *IdempotencyFailedError
	if !errors.As(err, &failed) || failed.RetryAfter <= 0 {
		t.Fatalf("retry of a failed key: %v", err)
	}
	if rec, _ := e.svc.Get(ctx, "", "m"); rec == nil || rec.State != StateFailed {
		t.Fatalf("record %+v", rec)
	}
}

func TestDo_InvalidKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	_, _, err := e.svc.Do(context.Background(), "", "fp", func(context.Context) ([]byte, error) { return nil, nil })
	var invalid *IdempotencyKeyInvalidError
	if !errors.As(err, &invalid) {
		t.Fatalf("err = %v", err)
	}
}
