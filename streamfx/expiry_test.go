package streamfx

import (
	"context"
	"testing"
	"time"

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
