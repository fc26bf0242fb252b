package storefx

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
)

// URLSettings is what a Redis URL says.
type URLSettings struct {
	Network  string // "tcp" or "unix"
	Addr     string // host:port, or a socket path
	Username string
	Password string
	DB       int
	TLS      *tls.Config // non-nil for rediss://
}

// ParseURL parses redis://, rediss:// and unix:// URLs. Errors name the
// Config.URL field and never repeat the password.
func ParseURL(raw string) (URLSettings, error) {
	if !strings.Contains(raw, "://") {
		if _, _, err := net.SplitHostPort(raw); err == nil && !strings.Contains(raw, "@") {
			return URLSettings{}, fieldErr("Config.URL", "%q is an address, not a URL: write redis://%s", raw, raw)
		}
		return URLSettings{}, fieldErr("Config.URL", "not a URL (redis://host:port/db, rediss://… or unix:///path)")
	}
	if msg := badPort(raw); msg != "" {
		return URLSettings{}, fieldErr("Config.URL", "%s", msg)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's message repeats the URL, password included: not used.
		return URLSettings{}, fieldErr("Config.URL", "not a URL (redis://host:port/db, rediss://… or unix:///path)")
	}
	if strings.Contains(u.Path+u.RawQuery+u.Fragment, "@") {
		// "redis://user:123/pa55@host": the host ends at the first '/', '?'
		// or '#', so a password holding one is read as host, path and
		// options, and the errors that follow would repeat its tail.
		return URLSettings{}, fieldErr("Config.URL", "'@' after the host: a user name or password holding '/', '?' or '#' "+
			"must be percent-encoded (%%2F, %%3F, %%23); the URL is not shown, it may hold credentials")
	}
	switch u.Scheme {
	case "redis", "rediss", "unix":
	default:
		return URLSettings{}, fieldErr("Config.URL", "scheme %q is not redis, rediss or unix", u.Scheme)
	}
	if u.Scheme != "unix" && u.Host == "" {
		// Not even the redacted URL is repeated: its user name may be a secret too.
		return URLSettings{}, fieldErr("Config.URL", "the URL has no host")
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "redis: ")
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
		return URLSettings{}, fieldErr("Config.URL", "%s", msg)
	}
	if o.Network != "unix" && validateAddr(o.Addr) != nil {
		// "redis://127.0.0.1:6379:6379": url.Parse takes "127.0.0.1:6379"
		// for the host name, and go-redis dialled it as a DNS name, for
		// ConnectTimeout, before start-up failed without naming the URL
		// (found by an adversary).
		return URLSettings{}, fieldErr("Config.URL", "the host %q is neither a host name with a port nor an IPv6 address in brackets (redis://[::1]:6379)", u.Host)
	}
	if err := unreadOptions(u); err != nil {
		return URLSettings{}, err
	}
	if o.DB < 0 { // go-redis reads "/-1" as db -1, and SELECT is then skipped: db 0 in silence
		return URLSettings{}, fieldErr("Config.URL", "database number %d is negative", o.DB)
	}
	if o.DB > maxDB { // SELECT refuses it at every connection: "ERR value is out of range"
		return URLSettings{}, fieldErr("Config.URL", "database number %d is beyond any Redis database number "+
			"(SELECT takes at most %d; the server's databases setting, 16 by default, is the real limit)", o.DB, maxDB)
	}
	return URLSettings{
		Network: o.Network, Addr: o.Addr, Username: o.Username,
		Password: o.Password, DB: o.DB, TLS: o.TLSConfig,
	}, nil
}

// urlOptionFields names the Config field of each query option go-redis
// reads in a URL. storefx takes address, credentials, database and TLS
// from a URL and its settings from Config, so an option is refused rather
// than accepted and ignored (?pool_size=3 left the pool at 20).
var urlOptionFields = map[string]string{
	"pool_size": "PoolSize", "min_idle_conns": "MinIdleConns", "dial_timeout": "DialTimeout",
	"read_timeout": "ReadTimeout", "write_timeout": "WriteTimeout", "client_name": "ClientName",
}

// unreadOptions refuses the query options of u that storefx does not apply:
// all but db (the unix form's database) and skip_verify (part of the TLS
// settings it keeps).
func unreadOptions(u *url.URL) error {
	for _, name := range slices.Sorted(maps.Keys(u.Query())) {
		switch {
		case name == "db" || name == "skip_verify":
		case urlOptionFields[name] != "":
			return fieldErr("Config.URL", "option %q is not read from the URL: set Config.%s", name, urlOptionFields[name])
		default:
			return fieldErr("Config.URL", "option %q is not read from the URL: set the matching Config field", name)
		}
	}
	return nil
}

// FromEnv returns the configuration an application gets from its environment:
// REDIS_URL when set, else DefaultConfig. An invalid REDIS_URL is an error
// naming the variable.
func FromEnv() (Config, error) {
	return fromEnv(os.Getenv)
}

func fromEnv(getenv func(string) string) (Config, error) {
	raw := getenv("REDIS_URL")
	if raw == "" {
		return DefaultConfig(), nil
	}
	if _, err := ParseURL(raw); err != nil {
		var cfgErr *redisfx.ConfigError
		if errors.As(err, &cfgErr) {
			return Config{}, redisfx.NewConfigError("storefx", "REDIS_URL", cfgErr.Reason)
		}
		return Config{}, err
	}
	return Config{URL: raw}, nil
}

// FromEnvConfig is FromEnv as an Fx constructor of *Config:
// fx.Provide(storefx.FromEnvConfig).
func FromEnvConfig() (*Config, error) {
	c, err := FromEnv()
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// badPort describes the port of a host-based URL when it is not a TCP port,
// without repeating anything before the host (the user name and password).
func badPort(raw string) string {
	scheme, rest, _ := strings.Cut(raw, "://")
	if scheme == "unix" {
		return ""
	}
	authority, path, _ := strings.Cut(rest, "/")
	if strings.Contains(path, "@") {
		return "" // a '/' inside the credentials: nothing here is safe to repeat
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		authority = authority[at+1:]
	}
	_, port, err := net.SplitHostPort(authority)
	if err != nil || port == "" {
		return "" // no port: the default 6379
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("port %q is not a TCP port (1-65535)", port)
	}
	return ""
}
