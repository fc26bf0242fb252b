package redistest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPrivateServer_KillRestartPause(t *testing.T) {
	s := StartPrivate(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("server answers after Kill")
	}
	s.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	if n := c.Exists(ctx, "k").Val(); n != 0 {
		t.Fatal("data survived a restart without persistence")
	}
	s.Pause(ctx, 300*time.Millisecond)
	began := time.Now()
	_ = c.Ping(ctx).Err()
	if time.Since(began) < 200*time.Millisecond {
		t.Fatal("CLIENT PAUSE had no effect")
	}
}

func TestPrefixesAreUnique(t *testing.T) {
	a, b := Prefix(t), Prefix(t)
	if a == b {
		t.Fatal("two prefixes collide")
	}
}

// On a shared server (REDIS_ADDR) a test's prefixed keys are deleted when
// it ends, and nothing else is.
func TestSharedServer_ForgetsOnlyTheTestsKeys(t *testing.T) {
	private := StartPrivate(t)
	ctx := context.Background()
	private.Client().Set(ctx, "someone-elses-key", "v", 0)
	var key string
	t.Run("user [x]*", func(t *testing.T) {
		t.Setenv("REDIS_ADDR", private.Addr())
		shared := Start(t)
		key = Prefix(t) + "k"
		shared.Client().Set(ctx, key, "v", 0)
	})
	if private.Client().Exists(ctx, key).Val() != 0 {
		t.Fatalf("%s left on the shared server", key)
	}
	if private.Client().Exists(ctx, "someone-elses-key").Val() != 1 {
		t.Fatal("a key of someone else was deleted")
	}
}

// Sleep returns once the server is asleep, on a loaded machine too: the
// first command sent after it is not answered before the server wakes.
func TestPrivateServer_SleepReturnsAsleep(t *testing.T) {
	s := StartPrivate(t)
	c := s.Client()
	ctx := context.Background()
	for range 5 {
		woke := s.Sleep(400 * time.Millisecond)
		began := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took < 100*time.Millisecond {
			t.Fatalf("a PING sent while asleep was answered in %v", took)
		}
		select {
		case <-woke:
		case <-time.After(5 * time.Second):
			t.Fatal("the channel did not close when the server woke")
		}
	}
}
