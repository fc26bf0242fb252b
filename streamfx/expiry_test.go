package streamfx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
)

// A Retention shorter than a second: a publish that finds the stream
// expired makes it again, and must give it its expiry, or the stream lives
// for ever. (Found by an adversary: the expiry was renewed at most once a
// second, so such a publish was a plain XADD.)
func TestRetention_ShorterThanASecond_ARecreatedStreamExpiresToo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "short"
	s := newStreams(t, srv, Config{Retention: 300 * time.Millisecond})
	ctx := context.Background()
	raw := srv.Client()
	if _, err := s.Publish(ctx, stream, []byte("1")); err != nil {
		t.Fatal(err)
	}
	for raw.Exists(ctx, stream).Val() == 1 { // expires within Retention
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s.Publish(ctx, stream, []byte("2")); err != nil {
		t.Fatal(err)
	}
	if ttl := raw.PTTL(ctx, stream).Val(); ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("the stream made again by a publish has PTTL %v (want within the Retention)", ttl)
	}
}

// The stream expires (here: is deleted) while its consumer is busy, and a
// publish makes it again without the group. The consumer recreates the
// group when its next read fails with NOGROUP, and must then read that
// message too, even with StartID "$": every message in the stream was
// published after the group was lost. (Found by an adversary: the group
// was recreated at "$", after the message, which was never handled.)
func TestGroupLostWhileRunning_RecreatedFromTheStart_EvenWithStartIDDollar(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "regroup"
	s := newStreams(t, srv, Config{StartID: "$", Retention: time.Hour})
	busy, release, second := make(chan struct{}), make(chan struct{}), make(chan struct{})
	if err := s.Handle(stream, func(_ context.Context, m Message) error {
		switch string(m.Data) {
		case "1":
			close(busy)
			<-release
		case "2":
			close(second)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	ctx := context.Background()
	if _, err := s.Publish(ctx, stream, []byte("1")); err != nil {
		t.Fatal(err)
	}
	wait(t, busy, 10*time.Second, "message 1 in its handler")
	if err := srv.Client().Del(ctx, stream).Err(); err != nil { // as an expiry would
		t.Fatal(err)
	}
	if _, err := s.Publish(ctx, stream, []byte("2")); err != nil {
		t.Fatal(err)
	}
	close(release)
	wait(t, second, 10*time.Second, "message 2, published after the group was lost")
}

// A publish sent within the renewal interval (so not renewing the expiry)
// and held up on its way until the stream has expired makes the stream
// again: it must still give it an expiry. (Found by an adversary: a plain
// XADD delayed by a stalled connection brought the stream back for ever.)
func TestRetention_DelayedPublishRecreatesTheStream_WithAnExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	p := faultproxy.Start(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	const retention = 500 * time.Millisecond
	s, err := New(rdb, Config{Retention: retention, StoreTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	ctx := context.Background()
	stream := redistest.Prefix(t) + "delayed"
	if _, err := s.Publish(ctx, stream, []byte("1")); err != nil { // renews the expiry
		t.Fatal(err)
	}
	raw := srv.Client()
	p.SetMode(faultproxy.Freeze) // the next publish is held up
	published := make(chan error, 1)
	go func() { _, err := s.Publish(ctx, stream, []byte("2")); published <- err }()
	for raw.Exists(ctx, stream).Val() == 1 { // until the stream has expired
		time.Sleep(10 * time.Millisecond)
	}
	p.SetMode(faultproxy.Forward)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	if ttl := raw.PTTL(ctx, stream).Val(); ttl <= 0 || ttl > retention {
		t.Fatalf("the stream made again by the held-up publish has PTTL %v, want within the Retention", ttl)
	}
}

// Found by an adversary (helper-78): a consumer making its group on a
// stream that was already there set the full Retention again, so the stream
// outlived its last publish by up to a Retention more. The group keeps the
// stream's expiry; only a stream MKSTREAM made gets one.
func TestRetention_GroupMadeOnAnExistingStream_KeepsItsExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "existing"
	cfg := Config{Retention: time.Minute, ClaimIdle: 100 * time.Millisecond}
	ctx := context.Background()
	raw := srv.Client()
	pub := newStreams(t, srv, cfg)
	if _, err := pub.Publish(ctx, stream, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// As if the last publish were 50 s old: 10 s of the Retention left.
	if err := raw.PExpire(ctx, stream, 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	cons := newStreams(t, srv, cfg)
	if err := cons.Handle(stream, func(context.Context, Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	start(t, cons)
	if ttl := raw.PTTL(ctx, stream).Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("the stream's PTTL is %v after its group was made, want at most the 10s it had", ttl)
	}
	fresh := redistest.Prefix(t) + "fresh" // made by its group: it gets the Retention
	other := newStreams(t, srv, cfg)
	if err := other.Handle(fresh, func(context.Context, Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	start(t, other)
	if ttl := raw.PTTL(ctx, fresh).Val(); ttl <= 50*time.Second {
		t.Fatalf("a stream made with its group has PTTL %v, want the Retention", ttl)
	}
}

// Found by an adversary (helper-78): only publishes renew a stream's
// expiry, so with a Retention shorter than the retries' span a message that
// kept failing after the last publish expired with its stream after two of
// its three attempts, and was never dead-lettered. Handle refuses such a
// Retention, naming it.
func TestHandle_RetentionShorterThanTheRetries_Refused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := func(context.Context, Message) error { return nil }
	short := newStreams(t, srv, Config{Retention: 2 * time.Second, ClaimIdle: time.Second, MaxAttempts: 3})
	err := short.Handle(redistest.Prefix(t)+"s", h)
	var cerr *redisfx.ConfigError
	if !errors.As(err, &cerr) || cerr.Field != "Config.Retention" {
		t.Fatalf("Handle with Retention 2s, ClaimIdle 1s, MaxAttempts 3: %v, want a ConfigError naming Config.Retention", err)
	}
	enough := newStreams(t, srv, Config{Retention: 6 * time.Second, ClaimIdle: time.Second, MaxAttempts: 3})
	if err := enough.Handle(redistest.Prefix(t)+"s", h); err != nil {
		t.Fatalf("Retention 2×MaxAttempts×ClaimIdle refused: %v", err)
	}
	if _, err := short.Publish(context.Background(), redistest.Prefix(t)+"s", []byte("x")); err != nil {
		t.Fatalf("a publisher is not held to the consumers' bound: %v", err)
	}
}

// Found by adversaries (helper-78, helper-79): only publishes renewed a
// stream's expiry, so failing messages whose retries outlasted the
// Retention after the last publish (a burst behind one consumer, a slow
// handler) expired with their stream before their last attempt and their
// dead-letter entry. A failed attempt renews the expiry: every message
// reaches the dead-letter stream, with a Retention Handle accepts.
func TestRetention_FailingMessagesReachTheDeadLetterStream(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		messages int
		handler  time.Duration
	}{{"burst", 30, 20 * time.Millisecond}, {"slow handler", 1, 400 * time.Millisecond}} {
		cfg := Config{ClaimIdle: 200 * time.Millisecond, MaxAttempts: 3, Retention: 1200 * time.Millisecond}
		s := newStreams(t, srv, cfg)
		stream := redistest.Prefix(t) + strings.ReplaceAll(c.name, " ", "-")
		if err := s.Handle(stream, func(context.Context, Message) error {
			time.Sleep(c.handler)
			return errors.New("always failing")
		}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		for i := range c.messages {
			if _, err := s.Publish(ctx, stream, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			n, err := srv.Client().XLen(ctx, stream+DLQSuffix).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == int64(c.messages) {
				break
			}
			if gone := srv.Client().Exists(ctx, stream).Val() == 0; gone || time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d failing messages dead-lettered; the stream expired: %v", c.name, n, c.messages, gone)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Found by an adversary (helper-80): the failure's renewal shared the
// publishes' throttle, so a failure inside a publish's renewal interval
// renewed nothing, and its retry, behind a backlog, found the stream gone:
// F fails at 0.5 s (in the slot of its own publish), ten messages of 90 ms
// published at 0.2 s delay its retry to ~1.2 s, past the publish's expiry.
func TestRetention_FailureInsideAPublishRenewalInterval_KeepsTheStream(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	s := newStreams(t, srv, Config{ClaimIdle: 200 * time.Millisecond, MaxAttempts: 3, Retention: 1200 * time.Millisecond})
	stream := redistest.Prefix(t) + "gap"
	if err := s.Handle(stream, func(_ context.Context, m Message) error {
		if string(m.Data) == "F" {
			if m.Attempt == 1 {
				time.Sleep(500 * time.Millisecond)
			}
			return errors.New("F fails")
		}
		time.Sleep(90 * time.Millisecond)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	if _, err := s.Publish(ctx, stream, []byte("F")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the backlog arrives while F runs
	for range 10 {
		if _, err := s.Publish(ctx, stream, []byte("S")); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); srv.Client().XLen(ctx, stream+DLQSuffix).Val() != 1; time.Sleep(20 * time.Millisecond) {
		if gone := srv.Client().Exists(ctx, stream).Val() == 0; gone || time.Now().After(deadline) {
			t.Fatalf("F was not dead-lettered; the stream expired: %v", gone)
		}
	}
}
