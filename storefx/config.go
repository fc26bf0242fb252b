package storefx

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/durations"
)

// DefaultClientName is the name of the client that Module provides unnamed.
// Command spans carry it as redisfx.client.
const DefaultClientName = "default"

// Config describes one Redis connection; the zero value connects to
// localhost:6379. The client is a Sentinel client with MasterName (or
// master_name in the URL), else a Cluster client with Cluster, two or more
// Addrs (or addr in the URL), else a standalone one.
type Config struct {
	// URL is parsed by go-redis (ParseURL, ParseClusterURL or
	// ParseFailoverURL): every option it reads (?dial_timeout=3s) overrides
	// the matching field; TLS, set, is used for rediss://.
	URL string
	// Addrs lists host:port addresses: one standalone server, the seed
	// nodes of a Cluster, or the Sentinels with MasterName.
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
	// ClientName is sent with CLIENT SETNAME on every connection.
	ClientName string

	// ClusterStateReloadInterval is how stale a Cluster slot map may get (a
	// dead master's replacement is learnt at the next reload). Default 2s.
	ClusterStateReloadInterval time.Duration
	// ConnectTimeout bounds the start-up check, a PING retried with backoff.
	// Default 5s.
	ConnectTimeout time.Duration
	// HealthCheckInterval is how often a background PING checks a started
	// client; /readyz and store_up report the last result. Default 1s.
	HealthCheckInterval time.Duration
	// HealthCheckTimeout bounds each health-check PING. Default 500ms.
	HealthCheckTimeout time.Duration

	// Breaker configures the client's circuit breaker, on by default.
	Breaker BreakerConfig

	// SendIdentity sends CLIENT SETINFO on each new connection.
	SendIdentity bool
	// MaintNotifications enables go-redis's maintenance notifications
	// (Redis Enterprise).
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

// defaultIOTimeout is the ReadTimeout and WriteTimeout of a zero Config
// (go-redis's own is 5s).
const defaultIOTimeout = 3 * time.Second

// validate checks what users plausibly get wrong, naming the field.
func (c Config) validate() error {
	switch {
	case c.URL != "" && len(c.Addrs) > 0:
		return fieldErr("Config.URL", "set together with Config.Addrs; use one of them")
	case hasPort(c.Host):
		return fieldErr("Config.Host", "%q holds a port: put the host in Config.Host and the port in Config.Port", c.Host)
	case c.Port < 0 || c.Port > 65535:
		return fieldErr("Config.Port", "%d is not a TCP port (1-65535)", c.Port)
	case c.DB < 0:
		return fieldErr("Config.DB", "%d is negative", c.DB)
	case c.DB != 0 && c.cluster():
		return fieldErr("Config.DB", "Redis Cluster has only database 0")
	case c.PoolSize < 0:
		return fieldErr("Config.PoolSize", "%d is negative", c.PoolSize)
	case c.MinIdleConns < 0:
		return fieldErr("Config.MinIdleConns", "%d is negative", c.MinIdleConns)
	case strings.ContainsFunc(c.ClientName, func(r rune) bool { return r < '!' || r > '~' }):
		return fieldErr("Config.ClientName", "%q: Redis accepts only '!' to '~' (no spaces, newlines or non-ASCII)", c.ClientName)
	}
	for i, a := range c.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fieldErr(fmt.Sprintf("Config.Addrs[%d]", i), "%q is not host:port (an IPv6 address is written [::1]:6379)", a)
		}
	}
	return nil
}

// hasPort reports whether host holds a port ("127.0.0.1:6380"); an IPv6
// address, bare or in brackets, has colons but no port.
func hasPort(host string) bool {
	bare := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	_, err := netip.ParseAddr(bare)
	return strings.Contains(host, ":") && err != nil
}

func (c Config) sentinel() bool { return c.MasterName != "" || urlHas(c.URL, "master_name") }

func (c Config) cluster() bool {
	return !c.sentinel() && (c.Cluster || len(c.Addrs) > 1 || urlHas(c.URL, "addr"))
}

func urlHas(raw, option string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Query().Has(option)
}

// clientOptions is the go-redis configuration of one client (one field set).
type clientOptions struct {
	simple   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// options validates c and maps it onto go-redis's options, URL last.
func (c Config) options() (o clientOptions, err error) {
	if err := c.validate(); err != nil {
		return o, err
	}
	u := c.universal()
	switch {
	case c.sentinel():
		o.failover, err = c.failoverOptions(u)
	case c.cluster():
		o.cluster, err = c.clusterOptions(u)
	default:
		o.simple, err = c.simpleOptions(u)
	}
	return o, err
}

// universal maps c onto go-redis's options, with storefx's defaults.
func (c Config) universal() *redis.UniversalOptions {
	u := &redis.UniversalOptions{
		Addrs: c.Addrs, MasterName: c.MasterName, SentinelUsername: c.SentinelUsername, SentinelPassword: c.SentinelPassword,
		Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: c.TLS,
		PoolSize: c.PoolSize, MinIdleConns: c.MinIdleConns, DialTimeout: c.DialTimeout,
		ReadTimeout: cmp.Or(c.ReadTimeout, defaultIOTimeout), WriteTimeout: cmp.Or(c.WriteTimeout, defaultIOTimeout),
		ClientName: c.ClientName, DisableIdentity: !c.SendIdentity,
		ContextTimeoutEnabled: true, // a caller's deadline holds against a paused Redis
	}
	if len(u.Addrs) == 0 {
		host := strings.TrimSuffix(strings.TrimPrefix(c.Host, "["), "]")
		u.Addrs = []string{net.JoinHostPort(cmp.Or(host, "localhost"), strconv.Itoa(cmp.Or(c.Port, 6379)))}
	}
	if !c.MaintNotifications {
		u.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	return u
}

func (c Config) simpleOptions(u *redis.UniversalOptions) (*redis.Options, error) {
	o := u.Simple()
	if err := fromURL(c.URL, o, redis.ParseURL); err != nil {
		return nil, err
	}
	o.TLSConfig = cmp.Or(c.TLS, o.TLSConfig)
	o.PoolTimeout = poolTimeout(o.PoolTimeout, o.ReadTimeout)
	if o.DB < 0 { // go-redis would skip SELECT: database 0, in silence
		return nil, fieldErr("Config.URL", "database %d is negative", o.DB)
	}
	return o, userWithoutPassword(o.Username, o.Password, c.Username, "Config.Username")
}

func (c Config) clusterOptions(u *redis.UniversalOptions) (*redis.ClusterOptions, error) {
	o := u.Cluster()
	o.ClusterStateReloadInterval = cmp.Or(c.ClusterStateReloadInterval, 2*time.Second)
	// go-redis gives a Cluster node 5 per CPU; PoolSize promises 10.
	o.PoolSize = cmp.Or(o.PoolSize, 10*runtime.GOMAXPROCS(0))
	if err := fromURL(c.URL, o, redis.ParseClusterURL); err != nil {
		return nil, err
	}
	// ParseClusterURL ignores the URL's path: its database would be dropped in silence.
	if s, err := redis.ParseURL(c.URL); err == nil && s.DB != 0 {
		return nil, fieldErr("Config.URL", "database %d, but Redis Cluster has only database 0", s.DB)
	}
	o.TLSConfig = cmp.Or(c.TLS, o.TLSConfig)
	o.PoolTimeout = poolTimeout(o.PoolTimeout, o.ReadTimeout)
	return o, userWithoutPassword(o.Username, o.Password, c.Username, "Config.Username")
}

func (c Config) failoverOptions(u *redis.UniversalOptions) (*redis.FailoverOptions, error) {
	o := u.Failover()
	if err := fromURL(c.URL, o, redis.ParseFailoverURL); err != nil {
		return nil, err
	}
	o.TLSConfig = cmp.Or(c.TLS, o.TLSConfig)
	o.PoolTimeout = poolTimeout(o.PoolTimeout, o.ReadTimeout)
	if o.DB < 0 {
		return nil, fieldErr("Config.URL", "database %d is negative", o.DB)
	}
	if err := userWithoutPassword(o.SentinelUsername, o.SentinelPassword, c.SentinelUsername, "Config.SentinelUsername"); err != nil {
		return nil, err
	}
	return o, userWithoutPassword(o.Username, o.Password, c.Username, "Config.Username")
}

// poolTimeout is go-redis's default pool wait, ReadTimeout + 1s, saturated.
func poolTimeout(pool, read time.Duration) time.Duration {
	if pool == 0 && read > 0 {
		return durations.Add(read, time.Second)
	}
	return pool
}

// userWithoutPassword refuses a user name without a password (go-redis
// would not authenticate), naming field or, when user is not configured,
// the URL.
func userWithoutPassword(user, password, configured, field string) error {
	if user == "" || password != "" {
		return nil
	}
	if user != configured {
		field = "Config.URL"
	}
	return fieldErr(field, "a user name without a password: go-redis would not authenticate and the connection "+
		"would be Redis's default user's (an ACL user with nopass takes any password)")
}
