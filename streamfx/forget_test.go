package streamfx

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
)

// A crashed consumer (it read a message and never came back) stays in the
// group only until its message was claimed by another and it has been idle
// for ForgetConsumersAfter; a consumer still holding a message, and the
// caller, are never forgotten. On the code before ForgetConsumersAfter the
// ghost stayed for ever.
func TestCrashedConsumerIsForgottenOnceItHoldsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "forget"
	ctx := context.Background()
	rdb := srv.Client()
	if err := rdb.XGroupCreateMkStream(ctx, stream, "redisfx", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"d", "a"}}).Err(); err != nil {
		t.Fatal(err)
	}
	// The ghost reads the message and dies holding it.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "redisfx", Consumer: "ghost", Streams: []string{stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	consumers := func() map[string]int64 {
		out := map[string]int64{}
		for _, c := range rdb.XInfoConsumers(ctx, stream, "redisfx").Val() {
			out[c.Name] = c.Pending
		}
		return out
	}
	handled := make(chan struct{})
	s := newStreams(t, srv, Config{Consumer: "survivor", ClaimIdle: 100 * time.Millisecond, ForgetConsumersAfter: time.Second})
	_ = s.Handle(stream, func(context.Context, Message) error { close(handled); return nil })
	start(t, s)
	wait(t, handled, 10*time.Second, "the ghost's message, claimed")
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		if _, still := consumers()["ghost"]; !still {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling Redis: there is no signal to wait on
	}
	if got := consumers(); len(got) != 1 || got["survivor"] != 0 {
		t.Fatalf("consumers after the ghost's message was handled: %v, want only the survivor", got)
	}
}

// The script never removes a consumer that holds a message, however idle,
// nor the caller.
func TestForgetScript_KeepsHoldersAndTheCaller(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "forget-script"
	ctx := context.Background()
	rdb := srv.Client()
	if err := rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	_ = rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"d", "a"}}).Err()
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "holder", Streams: []string{stream, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"empty", "caller"} {
		if err := rdb.XGroupCreateConsumer(ctx, stream, "g", name).Err(); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := forgetScript.Run(ctx, rdb, []string{stream}, "g", 0, "caller").Int()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range rdb.XInfoConsumers(ctx, stream, "g").Val() {
		names = append(names, c.Name)
	}
	if removed != 1 || len(names) != 2 || names[0] != "caller" || names[1] != "holder" {
		t.Fatalf("removed %d, left %v; want 1 removed (empty), caller and holder left", removed, names)
	}
	if n := rdb.XPending(ctx, stream, "g").Val().Count; n != 1 {
		t.Fatalf("pending = %d, want the holder's message kept", n)
	}
}

func TestConfig_ForgetConsumersAfterBelowTenClaimIdles(t *testing.T) {
	err := Config{ClaimIdle: time.Second, ForgetConsumersAfter: 5 * time.Second}.Validate()
	if err == nil || err.Error() != "streamfx: invalid Config.ForgetConsumersAfter: 5s is below 10×ClaimIdle (10s)" {
		t.Fatalf("Validate = %v", err)
	}
	cfg, err := Config{ClaimIdle: 10 * time.Minute}.normalize()
	if err != nil || cfg.ForgetConsumersAfter != 100*time.Minute {
		t.Fatalf("default with ClaimIdle 10m = %v, %v; want 100m", cfg.ForgetConsumersAfter, err)
	}
}
