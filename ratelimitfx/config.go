package ratelimitfx

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/plugintrace"
)

// Algorithm is how requests are counted.
type Algorithm string

const (
	// FixedWindow counts in a window that starts at a key's first request
	// and lasts Window; a client may get up to 2×Limit across a boundary.
	FixedWindow Algorithm = "fixed-window"
	// SlidingLog allows a request only if fewer than Limit fall in the last
	// Window: exact at every instant, at the cost of Limit entries per client.
	SlidingLog Algorithm = "sliding-log"
)

// ErrorPolicy says what happens when Redis cannot be reached.
type ErrorPolicy string

const (
	// FailOpen lets requests through unlimited while the store is down.
	FailOpen ErrorPolicy = "fail-open"
	// FailClosed refuses them with 503 rate_limit_unavailable.
	FailClosed ErrorPolicy = "fail-closed"
)

// Config holds the limiter options. Zero fields take the defaults.
type Config struct {
	// KeyPrefix is put before every counter key. Default "ratelimit:".
	KeyPrefix string
	// Limit and Window are the default rule: Limit requests per Window per
	// key. Defaults 100 and 1m. Window is whole milliseconds, at least 1ms
	// (Redis's unit: a truncated window would share another rule's counter).
	Limit  int64
	Window time.Duration
	// Algorithm: FixedWindow (default) or SlidingLog.
	Algorithm Algorithm
	// ErrorPolicy: FailOpen (default) or FailClosed.
	ErrorPolicy ErrorPolicy
	// TrustedProxies are the addresses or CIDR ranges (e.g. "10.0.0.0/8")
	// of proxies whose X-Forwarded-For is believed when keying by client
	// IP. Empty: the connection's address is the client.
	TrustedProxies []string
	// IPv6Prefix is the length of the IPv6 network ByIP keys a client by.
	// Default 64; 128 keys each address.
	IPv6Prefix int
	// StoreTimeout bounds one check's Redis call. Default 500ms.
	StoreTimeout time.Duration
	// DisableHeaders stops the RateLimit and RateLimit-Policy fields on
	// answers that pass (a 429 always has them).
	DisableHeaders bool
	// LegacyHeaders also sends RateLimit-Limit, -Remaining and -Reset, the
	// fields of the drafts up to -06 that many clients still read.
	LegacyHeaders bool
	// KeyAttribute is how a check's key is written into spans, errors and
	// logs. Default: redacted (plugintrace.RedactKey).
	KeyAttribute plugintrace.KeyAttribute
}

func configError(field, reason string) error {
	return redisfx.NewConfigError("ratelimitfx", "Config."+field, reason)
}

// Validate reports the first invalid option.
func (c Config) Validate() error { _, _, err := c.normalize(); return err }

func (c Config) normalize() (Config, []netip.Prefix, error) {
	c.KeyPrefix = cmp.Or(c.KeyPrefix, "ratelimit:")
	c.Limit = cmp.Or(c.Limit, 100)
	c.Window = cmp.Or(c.Window, time.Minute)
	c.StoreTimeout = cmp.Or(c.StoreTimeout, 500*time.Millisecond)
	c.IPv6Prefix = cmp.Or(c.IPv6Prefix, 64)
	c.Algorithm = cmp.Or(c.Algorithm, FixedWindow)
	c.ErrorPolicy = cmp.Or(c.ErrorPolicy, FailOpen)
	switch {
	case c.Limit < 0:
		return c, nil, configError("Limit", fmt.Sprintf("%d is negative", c.Limit))
	case windowInvalid(c.Window) != "":
		return c, nil, configError("Window", windowInvalid(c.Window))
	case c.IPv6Prefix < 1 || c.IPv6Prefix > 128:
		return c, nil, configError("IPv6Prefix", fmt.Sprintf("%d is not a prefix length from 1 to 128", c.IPv6Prefix))
	case c.Algorithm != FixedWindow && c.Algorithm != SlidingLog:
		return c, nil, configError("Algorithm", fmt.Sprintf("%q is not %q or %q", c.Algorithm, FixedWindow, SlidingLog))
	case c.ErrorPolicy != FailOpen && c.ErrorPolicy != FailClosed:
		return c, nil, configError("ErrorPolicy", fmt.Sprintf("%q is not %q or %q", c.ErrorPolicy, FailOpen, FailClosed))
	}
	proxies, err := parseProxies(c.TrustedProxies)
	if err != nil {
		return c, nil, configError("TrustedProxies", err.Error())
	}
	return c, proxies, nil
}

func parseProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if !strings.Contains(s, "/") {
			var a netip.Addr
			a, err = netip.ParseAddr(s)
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or CIDR range", s)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 { // "::ffff:10.0.0.0/104" is 10.0.0.0/8: addresses are unmapped
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
