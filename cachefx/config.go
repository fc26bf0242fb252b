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
	// LoadGuardTTL is the lifetime of GetOrLoad's lease, which keeps other
	// processes from loading the same key: how long a crashed loader blocks
	// them. Default 5s.
	LoadGuardTTL time.Duration
	// LoadWait is how long GetOrLoad waits for another process's load
	// before running the loader itself. Default LoadGuardTTL.
	LoadWait time.Duration
	// StoreTimeout bounds each Redis call of the cache. Default 1s.
	StoreTimeout time.Duration
	// Local is the optional in-process first layer.
	Local LocalConfig
	// KeyAttribute is how keys and tags are written into spans and errors.
	// Default: redacted (plugintrace.RedactKey).
	KeyAttribute plugintrace.KeyAttribute
}

// LocalConfig is the in-process first layer in front of Redis. It is off
// unless MaxEntries > 0.
type LocalConfig struct {
	// MaxEntries bounds the layer; the least recently used entry goes
	// first. 0 turns the layer off.
	MaxEntries int
	// TTL bounds how long a value is served from this process without
	// asking Redis (never longer than the value's own TTL). Default 5s.
	TTL time.Duration
}

func configError(field, reason string) error {
	return redisfx.NewConfigError("cachefx", "Config."+field, reason)
}

// Validate reports the first invalid option.
func (c Config) Validate() error { _, err := c.normalize(); return err }

func (c Config) normalize() (Config, error) {
	c.KeyPrefix = cmp.Or(c.KeyPrefix, "cache:")
	c.Namespace = cmp.Or(c.Namespace, "default")
	if err := cmp.Or(orDefault("MaxValueBytes", &c.MaxValueBytes, 1<<20), orDefault("Local.MaxEntries", &c.Local.MaxEntries, 0),
		orDefault("DefaultTTL", &c.DefaultTTL, 5*time.Minute), orDefault("LoadGuardTTL", &c.LoadGuardTTL, 5*time.Second),
		orDefault("LoadWait", &c.LoadWait, 0), orDefault("StoreTimeout", &c.StoreTimeout, time.Second),
		orDefault("Local.TTL", &c.Local.TTL, 5*time.Second)); err != nil {
		return c, err
	}
	c.LoadWait = cmp.Or(c.LoadWait, c.LoadGuardTTL)
	// Redis keeps whole milliseconds (an expiry of 0 deletes the key).
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
