package backoff

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNext_DoublesWithinJitterUpToMaxAndResets(t *testing.T) {
	b := Backoff{Min: 8 * time.Millisecond, Max: 50 * time.Millisecond}
	for i, want := range []time.Duration{8, 16, 32, 50, 50} {
		want *= time.Millisecond
		if got := b.Next(); got < want/2 || got > want {
			t.Fatalf("pause %d: %v, want within [%v, %v]", i, got, want/2, want)
		}
	}
	b.Reset()
	if got := b.Next(); got > 8*time.Millisecond {
		t.Fatalf("after Reset: %v, want at most Min", got)
	}
}

func TestNext_HugeMaxDoesNotOverflow(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 1<<63 - 1}
	var last time.Duration
	for range 80 {
		d := b.Next()
		if d < last/2 {
			t.Fatalf("pause %v after %v: the doubling wrapped around", d, last)
		}
		last = d
	}
}

func TestWait_EndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := Backoff{Min: time.Hour, Max: time.Hour}
	if b.Wait(ctx) {
		t.Fatal("Wait reported a live context after it was cancelled")
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) || !Sleep(context.Background(), 0) {
		t.Fatal("a live context reported done")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, 0) {
		t.Fatal("a done context reported live (no wait)")
	}
	began := time.Now()
	if Sleep(ctx, time.Hour) || time.Since(began) > time.Minute {
		t.Fatal("a done context did not end the wait")
	}
}
