package streamfx

import (
	"cmp"
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
	// untouched before any consumer of the group claims it again (a failed
	// message's retry, a crashed consumer's messages). Held messages are
	// touched every ClaimIdle/4, so a slow handler is never doubled.
	// Default 5s; at least 10ms.
	ClaimIdle time.Duration
	// Block is the longest wait of one read for new messages. Default 1s;
	// cut to ClaimIdle/2 and StopTimeout/2, so a stop never waits long for
	// a read.
	Block time.Duration
	// BatchSize is how many messages one read fetches. Default 10.
	BatchSize int
	// Concurrency is how many messages of one stream a process handles at
	// once. Default 1: a process's first deliveries in stream order; a
	// retried message runs after ClaimIdle, behind later ones.
	Concurrency int
	// MaxLen caps each stream's length, the dead-letter stream included:
	// every publish trims to about this many entries (XADD MAXLEN ~).
	// Default 0: no cap. Trimming ignores the group: an entry trimmed
	// before it was read, or while pending, is silently never run. Set it
	// far above the longest backlog (stream_consumer_lag), or bound the
	// stream with Retention instead.
	MaxLen int64
	// Retention, when set, makes each stream (and its dead-letter stream)
	// expire this long after its last publish or failed attempt (give or
	// take a second, or Retention/2 if shorter). 0 keeps streams until
	// deleted. Handle refuses one below 2×MaxAttempts×ClaimIdle.
	Retention time.Duration
	// StartID is where a group made at start begins reading: "0" (default)
	// for every message already in the stream, "$" for only new ones. A
	// group lost while running is made again from "0".
	StartID string
	// StopTimeout is how long running handlers get to finish at a stop
	// (see Stop). Default 10s.
	StopTimeout time.Duration
	// StoreTimeout bounds a publish and each bookkeeping call. Default 2s.
	StoreTimeout time.Duration
	// ForgetConsumersAfter removes from the group a consumer that holds no
	// pending message and has not read for this long (a crashed process).
	// Default 1h; at least 10×ClaimIdle.
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
	if err := cmp.Or(orDefault("MaxAttempts", &c.MaxAttempts, 3), orDefault("BatchSize", &c.BatchSize, 10),
		orDefault("Concurrency", &c.Concurrency, 1), orDefault("MaxLen", &c.MaxLen, 0),
		orDefault("ClaimIdle", &c.ClaimIdle, 5*time.Second), orDefault("Block", &c.Block, time.Second),
		orDefault("StopTimeout", &c.StopTimeout, 10*time.Second), orDefault("Retention", &c.Retention, 0),
		orDefault("StoreTimeout", &c.StoreTimeout, 2*time.Second), orDefault("ForgetConsumersAfter", &c.ForgetConsumersAfter, 0)); err != nil {
		return c, err
	}
	if c.ClaimIdle < 10*time.Millisecond {
		return c, configError("ClaimIdle", "below 10ms")
	}
	// A blocked read cannot be cut short without leaving its messages pending.
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

// orDefault sets *v to def when it is zero, and refuses a negative value.
func orDefault[T int | int64 | time.Duration](field string, v *T, def T) error {
	if *v < 0 {
		return configError(field, fmt.Sprintf("%v is negative", *v))
	}
	if *v == 0 {
		*v = def
	}
	return nil
}
