package ctxsleep

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
