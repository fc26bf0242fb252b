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
	// ClaimIdle is how long an unacknowledged message may sit untouched
	// before any consumer claims it again. Default 5s; at least 10ms.
	ClaimIdle time.Duration
	// Block is the longest wait of one read. Default 1s; at most
	// ClaimIdle/2 and StopTimeout/2.
	Block time.Duration
	// BatchSize is how many messages one read fetches. Default 10.
	BatchSize int
	// Concurrency is how many messages of one stream a process handles at
	// once. Default 1.
	Concurrency int
	// MaxLen caps each stream's length (XADD MAXLEN ~). Default 0: no cap.
	// Trimming ignores the group: a trimmed entry not yet handled is
	// silently never run (see docs/streams.md).
	MaxLen int64
	// Retention makes each stream expire this long after its last publish
	// or failed attempt; at least 2×MaxAttempts×ClaimIdle. Default 0: no
	// expiry.
	Retention time.Duration
	// StartID is where a group made at start begins: "0" (default) or "$"
	// (only new messages).
	StartID string
	// StopTimeout is how long running handlers get to finish at a stop.
	// Default 10s.
	StopTimeout time.Duration
	// StoreTimeout bounds a publish and each bookkeeping call. Default 2s.
	StoreTimeout time.Duration
	// ForgetConsumersAfter removes a consumer that holds nothing and has
	// not read for this long. Default 1h; at least 10×ClaimIdle.
	ForgetConsumersAfter time.Duration
}

func configError(field, reason string) error {
	return redisfx.NewConfigError("streamfx", "Config."+field, reason)
}

// Validate reports the first invalid option.
func (c Config) Validate() error { _, err := c.normalize(); return err }

func (c Config) normalize() (Config, error) {
	c.Group = cmp.Or(c.Group, "redisfx")
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
	c.StartID = cmp.Or(c.StartID, "0")
	if c.StartID != "0" && c.StartID != "$" {
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
