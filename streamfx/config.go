package streamfx

import (
	"fmt"
	"os"
	"time"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/durations"
	"github.com/redisfx/redisfx/internal/randid"
)

// Config holds the stream options. Zero fields take the defaults.
type Config struct {
	// Group is the consumer group of this application's handlers. Default
	// "redisfx".
	Group string
	// Consumer names this process within the group. Default
	// "<hostname>-<pid>-<random>", unique per process start.
	Consumer string
	// MaxAttempts is how many times a message is delivered before it moves
	// to the dead-letter stream "<stream>:dlq". Default 3.
	MaxAttempts int
	// ClaimIdle is how long a delivered, unacknowledged message may sit
	// untouched before any consumer of the group claims it again: a failed
	// message is retried after it, a crashed consumer's message is taken
	// over after it. Every message a consumer holds (running, waiting for
	// its turn in the batch, or waiting for the ack) is touched every
	// ClaimIdle/4, so a slow handler is never doubled. Default 5s; at
	// least 10ms.
	ClaimIdle time.Duration
	// Block is the longest wait of one read for new messages; it bounds how
	// quickly a stopping consumer notices. Default 1s; at most ClaimIdle/2
	// and StopTimeout/2 (a longer one is cut to that), so that a read in
	// progress at a stop ends within StopTimeout.
	Block time.Duration
	// BatchSize is how many messages one read fetches. Default 10.
	BatchSize int
	// Concurrency is how many messages of one stream a process handles at
	// once. Default 1: a process's first deliveries in stream order; a
	// retried message runs after ClaimIdle, behind later ones.
	Concurrency int
	// MaxLen caps each stream's length: every publish trims it to about
	// this many entries (XADD MAXLEN ~; Redis trims only whole nodes, so
	// somewhat more may remain), the dead-letter stream included. Default
	// 0: no cap.
	//
	// Trimming does not look at the consumer group: entries trimmed before
	// the group read them are never delivered, and one trimmed while
	// pending (its handler failed, or its consumer died) is never run again
	// nor dead-lettered; no error, log or metric reports it. The
	// at-least-once guarantee holds only for entries still in the stream:
	// set MaxLen far above the longest backlog you expect
	// (stream_consumer_lag), or leave it 0 and bound the stream with
	// Retention.
	MaxLen int64
	// Retention, when set, makes each stream (and its dead-letter stream)
	// expire this long after its last publish (give or take a second, or
	// Retention/2 if shorter: the expiry is renewed at most that often), so
	// no stream key lives forever. 0 keeps streams until deleted. A failed
	// attempt renews it too, so a message waiting for its retry keeps its
	// stream: Retention must exceed the wait between two attempts of a
	// message (ClaimIdle, and its turn behind the consumer's other
	// messages), and Handle refuses one below 2×MaxAttempts×ClaimIdle.
	Retention time.Duration
	// StartID is where a group made at start begins reading: "0" (default)
	// for every message already in the stream, "$" for only new ones. A
	// group lost while running is made again from "0", so that no message
	// published after the loss is skipped.
	StartID string
	// StopTimeout bounds the stop: running handlers get this long to
	// finish, then their context is cancelled and they get StoreTimeout
	// more; Stop returns within StopTimeout + 2×StoreTimeout whatever they
	// do. Default 10s.
	StopTimeout time.Duration
	// StoreTimeout bounds a publish and each bookkeeping call. Default 2s.
	StoreTimeout time.Duration
	// ForgetConsumersAfter removes from the group a consumer that holds no
	// pending message and has not read for this long (a crashed process:
	// its messages were claimed by others), so the group's consumer list
	// does not grow with every crash. Default 1h; at least 10×ClaimIdle, so
	// that a living consumer, which reads every Block, never qualifies.
	ForgetConsumersAfter time.Duration
}

// configError names the invalid field of Config.
func configError(field, reason string) error {
	return redisfx.NewConfigError("streamfx", "Config."+field, reason)
}

// Validate reports the first invalid option.
func (c Config) Validate() error { _, err := c.normalize(); return err }

func (c Config) normalize() (Config, error) {
	if c.Group == "" {
		c.Group = "redisfx"
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randid.Hex(3))
	}
	for _, n := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxAttempts", &c.MaxAttempts, 3}, {"BatchSize", &c.BatchSize, 10}, {"Concurrency", &c.Concurrency, 1}} {
		if *n.v < 0 {
			return c, configError(n.name, fmt.Sprintf("%d is negative", *n.v))
		}
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	if c.MaxLen < 0 {
		return c, configError("MaxLen", fmt.Sprintf("%d is negative", c.MaxLen))
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"ClaimIdle", &c.ClaimIdle, 5 * time.Second}, {"Block", &c.Block, time.Second},
		{"StopTimeout", &c.StopTimeout, 10 * time.Second}, {"Retention", &c.Retention, 0}, {"StoreTimeout", &c.StoreTimeout, 2 * time.Second},
		{"ForgetConsumersAfter", &c.ForgetConsumersAfter, 0}} {
		if *d.v < 0 {
			return c, configError(d.name, fmt.Sprintf("%v is negative", *d.v))
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.ClaimIdle < 10*time.Millisecond {
		return c, configError("ClaimIdle", "below 10ms")
	}
	// A read in progress at a stop must end well within StopTimeout: a
	// blocked read cannot be cut short without leaving its messages pending.
	c.Block = max(min(c.Block, c.ClaimIdle/2, c.StopTimeout/2), time.Millisecond)
	forget := durations.Mul(c.ClaimIdle, 10)
	switch {
	case c.ForgetConsumersAfter == 0:
		c.ForgetConsumersAfter = max(time.Hour, forget)
	case c.ForgetConsumersAfter < forget:
		return c, configError("ForgetConsumersAfter", fmt.Sprintf("%v is below 10×ClaimIdle (%v)", c.ForgetConsumersAfter, forget))
	}
	switch c.StartID {
	case "":
		c.StartID = "0"
	case "0", "$":
	default:
		return c, configError("StartID", fmt.Sprintf("%q is not \"0\" or \"$\"", c.StartID))
	}
	return c, nil
}
