package storefx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/fxconfig"
)

// DefaultClientName is the name of the client that Module provides unnamed.
// Command spans carry it as redisfx.client.
const DefaultClientName = "default"

// Config describes one Redis connection. The zero value connects to
// localhost:6379 without TLS. Every duration (Breaker's too) is at most
// 100 years; a longer one is refused, naming it.
//
// The address is chosen from the first of these that is set: URL, Addrs,
// Host/Port. With MasterName set the addresses are Sentinel addresses; with
// two or more Addrs (or Cluster set) the client is a Redis Cluster client.
type Config struct {
	// URL is a redis:// or rediss:// URL (redis://user:pass@host:port/db) or a
	// unix:// socket URL (unix:///run/redis.sock?db=2). Settings in the URL
	// override Username, Password, DB and TLS.
	URL string
	// Addrs lists host:port addresses: one for a standalone server, several
	// for the seed nodes of a Cluster, or the Sentinels with MasterName.
	Addrs []string
	// Host and Port name a standalone server when URL and Addrs are empty.
	// Defaults: "localhost" and 6379.
	Host string
	Port int
	// Cluster forces a Cluster client even with a single seed address.
	Cluster bool
	// MasterName selects Sentinel: Addrs are the Sentinels to ask.
	MasterName string
	// SentinelUsername and SentinelPassword authenticate with the Sentinels.
	SentinelUsername string
	SentinelPassword string

	// Username and Password authenticate (Redis 6 ACL, or AUTH with a password only).
	Username string
	Password string
	// DB selects the database (standalone and Sentinel only).
	DB int
	// TLS enables TLS with this configuration; rediss:// URLs enable it too.
	TLS *tls.Config

	// PoolSize is the maximum number of connections per node. Default: 10 per CPU.
	PoolSize int
	// MinIdleConns keeps this many idle connections open.
	MinIdleConns int
	// DialTimeout bounds establishing a connection. Default 5s.
	DialTimeout time.Duration
	// ReadTimeout and WriteTimeout bound socket reads and writes. Default 3s.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// ClientName is sent with CLIENT SETNAME on every connection, so the
	// connection is recognisable in CLIENT LIST. Empty sends nothing.
	ClientName string

	// ClusterStateReloadInterval is how stale a Cluster client's slot map may
	// get before it is reloaded. After a master dies, its slots move to a
	// replica, but go-redis learns of it only at the next reload (a dead node
	// sends no MOVED; go-redis issue #3979). Default 2s (go-redis: 60s).
	ClusterStateReloadInterval time.Duration
	// ConnectTimeout bounds the start-up check: Module pings the server,
	// retrying with backoff, for at most this long before start-up fails.
	// Default 5s; it is also cut short by Fx's start timeout.
	ConnectTimeout time.Duration

	// HealthCheckInterval is how often a background PING checks the server
	// once the client is started; /readyz and the store_up gauge report the
	// last result, so they never wait for Redis. Default 1s.
	HealthCheckInterval time.Duration
	// HealthCheckTimeout bounds each health-check PING: a server that does
	// not answer within it (down, frozen, paused) is reported down. Default
	// 500ms.
	HealthCheckTimeout time.Duration

	// Breaker configures the client's circuit breaker, on by default: after
	// consecutive failed commands, commands fail at once with
	// ErrCircuitOpen instead of waiting for a dead or frozen Redis, until a
	// background probe reaches it again (see BreakerConfig).
	Breaker BreakerConfig

	// SendIdentity sends CLIENT SETINFO (library name and version) on each new
	// connection. Off by default: on servers that lack the command it only
	// adds a failed round trip to every dial.
	SendIdentity bool
	// MaintNotifications enables go-redis's maintenance-notification
	// handshake (useful only on Redis Enterprise / Redis Cloud). Off by
	// default, because on other servers it fails and logs at every dial.
	MaintNotifications bool
}

// DefaultConfig returns the configuration used when an application supplies
// none: a standalone server on localhost:6379.
func DefaultConfig() Config {
	return Config{Host: "localhost", Port: 6379}
}

func fieldErr(field, format string, args ...any) error {
	return redisfx.NewConfigError("storefx", field, fmt.Sprintf(format, args...))
}

// Validate reports the first invalid field, naming it.
func (c Config) Validate() error {
	_, err := c.options()
	return err
}

// defaultIOTimeout is the ReadTimeout and WriteTimeout of a zero Config.
const defaultIOTimeout = 3 * time.Second

// options turns the Config into go-redis options, validating every field.
func (c Config) options() (*redis.UniversalOptions, error) {
	o := &redis.UniversalOptions{
		Addrs:            c.Addrs,
		MasterName:       c.MasterName,
		SentinelUsername: c.SentinelUsername,
		SentinelPassword: c.SentinelPassword,
		Username:         c.Username,
		Password:         c.Password,
		DB:               c.DB,
		TLSConfig:        c.TLS,
		PoolSize:         c.PoolSize,
		MinIdleConns:     c.MinIdleConns,
		DialTimeout:      c.DialTimeout,
		ReadTimeout:      c.ReadTimeout,
		WriteTimeout:     c.WriteTimeout,
		ClientName:       c.ClientName,
		IsClusterMode:    c.Cluster,
		DisableIdentity:  !c.SendIdentity,
		// A context deadline bounds the network wait of a command, so that
		// a caller's timeout (idempotencyfx's StoreTimeout) holds even when
		// Redis is paused or slow; go-redis ignores it otherwise.
		ContextTimeoutEnabled: true,
	}
	if !c.MaintNotifications {
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	switch {
	case c.URL != "":
		if len(c.Addrs) > 0 {
			return nil, fieldErr("Config.URL", "set together with Config.Addrs; use one of them")
		}
		u, err := ParseURL(c.URL)
		if err != nil {
			return nil, err
		}
		o.Addrs = []string{u.Addr}
		if u.Network == "unix" {
			// UniversalOptions has no Network field: dial the socket ourselves.
			o.Dialer = func(ctx context.Context, _, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", addr)
			}
		}
		o.DB = u.DB
		if u.Username != "" {
			o.Username = u.Username
		}
		if u.Password != "" {
			o.Password = u.Password
		}
		if u.TLS != nil && o.TLSConfig == nil {
			o.TLSConfig = u.TLS
		}
	case len(c.Addrs) > 0:
		for i, a := range c.Addrs {
			if err := validateAddr(a); err != nil {
				return nil, fieldErr(fmt.Sprintf("Config.Addrs[%d]", i), "%v", err)
			}
		}
	default:
		host, port := c.Host, c.Port
		if host == "" {
			host = "localhost"
		}
		if port == 0 {
			port = 6379
		}
		if port < 0 || port > 65535 {
			return nil, fieldErr("Config.Port", "%d is not a TCP port (1-65535)", c.Port)
		}
		host, err := validateHost(host)
		if err != nil {
			return nil, fieldErr("Config.Host", "%v", err)
		}
		o.Addrs = []string{net.JoinHostPort(host, strconv.Itoa(port))}
	}
	if c.DB < 0 {
		return nil, fieldErr("Config.DB", "%d is negative", c.DB)
	}
	if c.DB > maxDB {
		return nil, fieldErr("Config.DB", "%d is beyond any Redis database number (SELECT takes at most %d; "+
			"the server's databases setting, 16 by default, is the real limit)", c.DB, maxDB)
	}
	if c.DB != 0 && (len(c.Addrs) > 1 || c.Cluster) && c.MasterName == "" {
		return nil, fieldErr("Config.DB", "Redis Cluster has only database 0")
	}
	if o.DB != 0 && c.Cluster && c.MasterName == "" {
		// The URL's database: go-redis's Cluster client drops it in silence.
		return nil, fieldErr("Config.URL", "database %d, but Redis Cluster has only database 0", o.DB)
	}
	// go-redis authenticates only when there is a password: a user name
	// alone would connect as Redis's default user, in silence. (An ACL user
	// with nopass takes any password.)
	if o.Username != "" && o.Password == "" {
		field := "Config.Username"
		if c.Username == "" {
			field = "Config.URL"
		}
		return nil, fieldErr(field, "a user name without a password: go-redis would not authenticate and the "+
			"connection would be Redis's default user's; give the user's password (any one for an ACL user with nopass)")
	}
	if c.SentinelUsername != "" && c.SentinelPassword == "" {
		return nil, fieldErr("Config.SentinelUsername", "a user name without Config.SentinelPassword: go-redis would not "+
			"authenticate with the Sentinels and would use their default user")
	}
	for _, r := range c.ClientName {
		if r < '!' || r > '~' {
			// Redis refuses CLIENT SETNAME with it, and so every connection.
			return nil, fieldErr("Config.ClientName", "%q holds %q: Redis accepts only '!' to '~' (no spaces, newlines or non-ASCII)",
				c.ClientName, r)
		}
	}
	// go-redis's own default is 5s since v9.x; the documented one is 3s.
	if o.ReadTimeout == 0 {
		o.ReadTimeout = defaultIOTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = defaultIOTimeout
	}
	// Checked in the order of the struct, so the same Config always reports
	// the same field first.
	for _, f := range []struct {
		name string
		v    int
	}{{"Config.PoolSize", c.PoolSize}, {"Config.MinIdleConns", c.MinIdleConns}} {
		if f.v < 0 {
			return nil, fieldErr(f.name, "%d is negative", f.v)
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"Config.DialTimeout", c.DialTimeout}, {"Config.ReadTimeout", c.ReadTimeout},
		{"Config.WriteTimeout", c.WriteTimeout}, {"Config.ClusterStateReloadInterval", c.ClusterStateReloadInterval},
		{"Config.ConnectTimeout", c.ConnectTimeout}, {"Config.HealthCheckInterval", c.HealthCheckInterval},
		{"Config.HealthCheckTimeout", c.HealthCheckTimeout},
	} {
		if f.d < 0 {
			return nil, fieldErr(f.name, "%v is negative", f.d)
		}
		if why := fxconfig.TooLong(f.d); why != "" {
			// The arithmetic on them must not overflow: go-redis waits for
			// a pooled connection ReadTimeout + 1s, and a health check is
			// stale after HealthCheckInterval + HealthCheckTimeout.
			return nil, fieldErr(f.name, "%s", why)
		}
	}
	if err := c.Breaker.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// maxDB is the largest database number SELECT accepts (a signed 32-bit
// integer); the server's databases setting decides which ones exist.
const maxDB = math.MaxInt32

// validateHost checks Config.Host and returns it as net.JoinHostPort wants
// it: an IPv6 literal may be written bare ("::1") or in brackets ("[::1]").
// A host holding a port ("127.0.0.1:6380") is refused: joined with
// Config.Port it made "[127.0.0.1:6380]:6379", which fails only at start-up,
// after ConnectTimeout, as "no such host".
func validateHost(host string) (string, error) {
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		if isIPv6(host[1 : len(host)-1]) {
			return host[1 : len(host)-1], nil
		}
	}
	if strings.Contains(host, ":") {
		if isIPv6(host) {
			return host, nil // a bare IPv6 address: its colons are not a port
		}
		if h, p, err := net.SplitHostPort(host); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 && n <= 65535 && h != "" {
				return "", fmt.Errorf("%q is host:port: put the host (%q) in Config.Host and the port (%d) in Config.Port", host, h, n)
			}
			return "", fmt.Errorf("%q holds a ':' and a port part: put only the host in Config.Host and the port in Config.Port", host)
		}
		return "", fmt.Errorf("%q is neither a host name nor an IPv6 address", host)
	}
	if !hostName(host) {
		return "", fmt.Errorf("%q is not a host name", host)
	}
	return host, nil
}

// hostName reports whether s is an IPv4 address or could be a name: letters,
// digits, '-', '_' and '.', no empty label (a trailing dot is allowed), and
// a dotted number only as an IPv4 address. Anything else was dialled until
// ConnectTimeout and failed as "no such host", naming no field:
// "127.0.0.1,127.0.0.2", "127.0.0.1;6379", "256.1.1.1", "foo..bar" (found
// by adversaries). Go's DNS rules are not applied whole: /etc/hosts, read
// first, takes names DNS refuses (an all-digit container name, a label
// over 63 characters), and those dialled before.
func hostName(s string) bool {
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Is4()
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" || strings.Contains(s, "..") || s[0] == '.' {
		return false
	}
	dottedNumber := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		digit := '0' <= c && c <= '9'
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_'
		if !digit && !letter && c != '.' {
			return false
		}
		dottedNumber = dottedNumber && !letter
	}
	return !dottedNumber || !strings.Contains(s, ".")
}

// isIPv6 reports whether s is an IPv6 address, with an optional zone
// ("fe80::1%eth0"). netip reads everything after '%' as the zone, so a zone
// holding ':', '[' or ']' ("fe80::1%eth0]:80") is a port in disguise.
func isIPv6(s string) bool {
	ip, err := netip.ParseAddr(s)
	return err == nil && ip.Is6() && !strings.ContainsAny(ip.Zone(), ":[]/ ")
}

// validateAddr checks one host:port of Config.Addrs (a standalone server,
// a Cluster seed or a Sentinel).
func validateAddr(a string) error {
	bare := a
	if strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") {
		bare = a[1 : len(a)-1]
	}
	if isIPv6(bare) {
		return fmt.Errorf("%q is an IPv6 address without a port: write [%s]:6379", a, bare)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port", a)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("%q has no valid port", a)
	}
	if host == "" {
		return errors.New("empty host in " + a)
	}
	if strings.Contains(host, ":") {
		if !isIPv6(host) {
			return fmt.Errorf("%q: %q in brackets is not an IPv6 address", a, host)
		}
	} else if !hostName(host) {
		return fmt.Errorf("%q: %q is not a host name", a, host)
	}
	return nil
}

// healthCheck returns HealthCheckInterval and HealthCheckTimeout, or their defaults.
func (c Config) healthCheck() (interval, timeout time.Duration) {
	interval, timeout = c.HealthCheckInterval, c.HealthCheckTimeout
	if interval == 0 {
		interval = DefaultHealthCheckInterval
	}
	if timeout == 0 {
		timeout = DefaultHealthCheckTimeout
	}
	return interval, timeout
}

// connectTimeout is ConnectTimeout or its default.
func (c Config) connectTimeout() time.Duration {
	if c.ConnectTimeout > 0 {
		return c.ConnectTimeout
	}
	return 5 * time.Second
}
