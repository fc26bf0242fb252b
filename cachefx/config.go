package cachefx

import (
	"cmp"
	"fmt"
	"time"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/plugintrace"
)

// Config holds the cache options. Zero fields take the defaults.
type Config struct {
	// KeyPrefix is put before every key in Redis. Default "cache:".
	KeyPrefix string
	// Namespace is the default namespace (Cache.Namespace makes others).
	// Keys live at <KeyPrefix><Namespace>:<key>. Default "default".
	Namespace string
	// DefaultTTL is the lifetime of a value stored with ttl 0. Default 5m.
	DefaultTTL time.Duration
	// MaxValueBytes refuses larger values with *ValueTooLargeError.
	// Default 1 MiB.
	MaxValueBytes int
	// LoadGuardTTL is the lifetime of the distributed guard that keeps
	// other processes from running GetOrLoad's loader for the same key at
	// the same time. It bounds how long a crashed loader blocks others.
	// Default 5s.
	LoadGuardTTL time.Duration
	// LoadWait is how long GetOrLoad waits for another process's load
	// before running the loader itself. Default LoadGuardTTL.
	LoadWait time.Duration
	// StoreTimeout bounds each Redis call of the cache. Default 1s.
	StoreTimeout time.Duration
	// Local is the optional in-process first layer.
	Local LocalConfig
	// KeyAttribute is how keys and tags are written into the
	// redisfx.cache.key and tags span attributes and into error messages:
	// a key is often a business identifier (a user id, an e-mail
	// address). The zero value, plugintrace.RedactKey(), writes
	// "[redacted]"; plugintrace.HashKey(secret) writes a keyed digest, the
	// same for the same key, so the spans of one hot key can be found
	// together; plugintrace.RawKey() writes keys as given.
	KeyAttribute plugintrace.KeyAttribute
}

// LocalConfig is the in-process first layer in front of Redis. It is off
// unless MaxEntries > 0.
type LocalConfig struct {
	// MaxEntries bounds the layer; the least recently used entry goes
	// first. 0 turns the layer off.
	MaxEntries int
	// TTL bounds how long a value is served from this process without
	// asking Redis; it is also the longest staleness if an invalidation
	// message is lost. Default 5s (never longer than the value's own TTL).
	TTL time.Duration
}

// configError names the invalid field of Config.
func configError(field, reason string) error {
	return redisfx.NewConfigError("cachefx", "Config."+field, reason)
}

// Validate reports the first invalid option.
func (c Config) Validate() error { _, err := c.normalize(); return err }

func (c Config) normalize() (Config, error) {
	if c.KeyPrefix == "" {
		c.KeyPrefix = "cache:"
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if err := cmp.Or(orDefault("MaxValueBytes", &c.MaxValueBytes, 1<<20), orDefault("Local.MaxEntries", &c.Local.MaxEntries, 0),
		orDefault("DefaultTTL", &c.DefaultTTL, 5*time.Minute), orDefault("LoadGuardTTL", &c.LoadGuardTTL, 5*time.Second),
		orDefault("LoadWait", &c.LoadWait, 0), orDefault("StoreTimeout", &c.StoreTimeout, time.Second),
		orDefault("Local.TTL", &c.Local.TTL, 5*time.Second)); err != nil {
		return c, err
	}
	if c.LoadWait == 0 {
		c.LoadWait = c.LoadGuardTTL
	}
	// Redis takes whole milliseconds: an expiry of 0 deletes the key, and
	// the lease's renewal ticker (LoadGuardTTL/3) of 0 panics.
	if c.DefaultTTL < time.Millisecond {
		return c, configError("DefaultTTL", fmt.Sprintf("%v is below Redis's 1ms resolution", c.DefaultTTL))
	}
	if c.LoadGuardTTL < time.Millisecond {
		return c, configError("LoadGuardTTL", fmt.Sprintf("%v is below Redis's 1ms resolution", c.LoadGuardTTL))
	}
	return c, nil
}

// orDefault sets *v to def when it is zero, and refuses a negative value.
func orDefault[T int | time.Duration](field string, v *T, def T) error {
	if *v < 0 {
		return configError(field, fmt.Sprintf("%v is negative", *v))
	}
	if *v == 0 {
		*v = def
	}
	return nil
}
