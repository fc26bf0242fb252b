package idempotencyfx

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/redisfx/redisfx"
)

// ErrorPolicy says what happens when Redis cannot be reached.
type ErrorPolicy string

const (
	// FailClosed rejects the request with 500 idempotency_store_unavailable;
	// the handler does not run. The default: a payment is better refused than
	// run twice.
	FailClosed ErrorPolicy = "fail-closed"
	// FailOpen runs the handler without protection and logs a warning.
	FailOpen ErrorPolicy = "fail-open"
)

// FingerprintGenerator computes the fingerprint of a request from it and its
// whole body (restored for the handler). Two requests with the same key
// count as one only if their fingerprints are equal.
type FingerprintGenerator func(r *http.Request, body []byte) (string, error)

// ScopeFunc returns the scope of a request (the tenant, the authenticated
// user): one scope never replays another's response.
type ScopeFunc func(r *http.Request) (string, error)

// Config holds the options of the idempotency module. Zero fields take
// their defaults.
type Config struct {
	// DefaultTTL is how long a completed record lives. Default 24h; NeverExpire
	// keeps records for ever (warned about at start).
	DefaultTTL time.Duration
	// HeaderName carries the key (matched case-insensitively). Default "Idempotency-Key".
	HeaderName string
	// KeyPrefix is put before the key to form the Redis key. Default "idempotency:".
	KeyPrefix string
	// LockTimeout is the in-progress lease, renewed every third of it while the
	// handler runs, and the lifetime of a failed record. Default 30s, minimum
	// 10ms; values under ShortLockTimeout (warned about) are for tests.
	LockTimeout time.Duration
	// WaitTimeout is the longest a concurrent duplicate waits for the first
	// request to finish before it gets 409. Default 10s. Use NoWait for 0.
	WaitTimeout time.Duration
	// NoWait makes concurrent duplicates get 409 at once (WaitTimeout 0).
	NoWait bool
	// ErrorPolicy: FailClosed (default) or FailOpen.
	ErrorPolicy ErrorPolicy
	// FingerprintGenerator replaces DefaultFingerprint.
	FingerprintGenerator FingerprintGenerator
	// Scope, if set, scopes keys per tenant or user (see ScopeFunc).
	Scope ScopeFunc
	// RequireKey makes every Idempotent() route answer 400
	// idempotency_key_required to requests without a key.
	RequireKey bool
	// MaxBodyBytes bounds the request body read for the fingerprint; larger
	// bodies get 413 before any store call. Default 1 MiB.
	MaxBodyBytes int64
	// MaxResponseBytes bounds the recorded response body (at most
	// MaxResponseBytesLimit); larger responses pass through, not replayable.
	// Default 1 MiB.
	MaxResponseBytes int
	// SkipHeaders are response headers that are not recorded. Default: Date,
	// Content-Length, Set-Cookie. Hop-by-hop headers are never recorded.
	SkipHeaders []string
	// StoreTimeout bounds each Redis call on the request path (at least 63/64
	// of it, see docs/configuration.md). Default 2s.
	StoreTimeout time.Duration
	// ReplicaAcks, above 0, makes every claim that takes a record and every
	// recorded outcome WAIT for that many replicas (docs/operations.md).
	ReplicaAcks int
	// ReplicaAckTimeout bounds that wait. Default 50ms.
	ReplicaAckTimeout time.Duration
	// PollInterval is the fallback poll of a waiting duplicate, in case a
	// completion notification is lost. Default 500ms.
	PollInterval time.Duration
}

// ShortLockTimeout is the shortest LockTimeout Start takes without a warning.
const ShortLockTimeout = time.Second

// Defaults of Config.
const (
	DefaultTTL          = 24 * time.Hour
	DefaultHeaderName   = "Idempotency-Key"
	DefaultKeyPrefix    = "idempotency:"
	DefaultLockTimeout  = 30 * time.Second
	DefaultWaitTimeout  = 10 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	DefaultMaxResponse  = 1 << 20
	DefaultStoreTimeout = 2 * time.Second
	DefaultPollInterval = 500 * time.Millisecond
)

// NeverExpire as Config.DefaultTTL keeps completed records for ever (a zero
// DefaultTTL takes the default, as every zero field does).
const NeverExpire time.Duration = -1

// MaxResponseBytesLimit is the largest MaxResponseBytes accepted: reading a
// record back is bounded, and a replay is the whole record or nothing.
const MaxResponseBytesLimit = 64 << 20

// DefaultConfig returns the configuration used when the application supplies none.
func DefaultConfig() Config {
	return Config{DefaultTTL: DefaultTTL}
}

// settings is a validated Config with defaults applied.
type settings struct {
	Config
	header string              // canonical
	skip   map[string]struct{} // canonical names of headers not recorded
}

// normalize reports the first option set to a value no default can mend,
// else applies the defaults.
func (c Config) normalize() (*settings, error) {
	bad := func(opt, format string, args ...any) error {
		return redisfx.NewConfigError("idempotencyfx", "Config."+opt, fmt.Sprintf(format, args...))
	}
	switch {
	case c.StoreTimeout < 0:
		return nil, bad("StoreTimeout", "%v is negative", c.StoreTimeout)
	case c.DefaultTTL < 0 && c.DefaultTTL != NeverExpire:
		return nil, bad("DefaultTTL", "%v is negative (NeverExpire keeps records for ever)", c.DefaultTTL)
	case c.DefaultTTL > 0 && c.DefaultTTL < time.Millisecond:
		return nil, bad("DefaultTTL", "%v is below Redis's 1ms resolution", c.DefaultTTL)
	case strings.ContainsFunc(c.HeaderName, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) }):
		return nil, bad("HeaderName", "%q is not an HTTP header name", c.HeaderName)
	case c.LockTimeout != 0 && c.LockTimeout < 10*time.Millisecond:
		return nil, bad("LockTimeout", "%v is too short (minimum 10ms)", c.LockTimeout)
	case c.NoWait && c.WaitTimeout != 0:
		return nil, bad("NoWait", "set together with WaitTimeout %v", c.WaitTimeout)
	case c.ErrorPolicy != "" && c.ErrorPolicy != FailClosed && c.ErrorPolicy != FailOpen:
		return nil, bad("ErrorPolicy", "%q is not %q or %q", c.ErrorPolicy, FailClosed, FailOpen)
	case c.MaxResponseBytes > MaxResponseBytesLimit:
		return nil, bad("MaxResponseBytes", "%d is above MaxResponseBytesLimit (%d): a replay could not be read back whole", c.MaxResponseBytes, MaxResponseBytesLimit)
	case c.ReplicaAcks < 0:
		return nil, bad("ReplicaAcks", "%d is negative", c.ReplicaAcks)
	}
	orDefault(&c.DefaultTTL, DefaultTTL)
	orDefault(&c.HeaderName, DefaultHeaderName)
	orDefault(&c.KeyPrefix, DefaultKeyPrefix)
	orDefault(&c.LockTimeout, DefaultLockTimeout)
	if !c.NoWait {
		orDefault(&c.WaitTimeout, DefaultWaitTimeout)
	}
	orDefault(&c.ErrorPolicy, FailClosed)
	orDefault(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	orDefault(&c.MaxResponseBytes, DefaultMaxResponse)
	orDefault(&c.StoreTimeout, DefaultStoreTimeout)
	orDefault(&c.PollInterval, DefaultPollInterval)
	orDefault(&c.ReplicaAckTimeout, 50*time.Millisecond)
	if c.FingerprintGenerator == nil {
		c.FingerprintGenerator = DefaultFingerprint
	}
	s := &settings{Config: c, header: textproto.CanonicalMIMEHeaderKey(c.HeaderName), skip: map[string]struct{}{}}
	skip := c.SkipHeaders
	if skip == nil {
		skip = []string{"Date", "Content-Length", "Set-Cookie"}
	}
	for _, h := range append(skip, hopByHop...) {
		s.skip[textproto.CanonicalMIMEHeaderKey(h)] = struct{}{}
	}
	return s, nil
}

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// hopByHop headers are never recorded (RFC 9110 §7.6.1).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Transfer-Encoding", "Upgrade"}

// Validate reports the first invalid option.
func (c Config) Validate() error {
	_, err := c.normalize()
	return err
}
