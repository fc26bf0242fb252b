package storefx

import (
	"crypto/tls"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
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
	u, err := url.Parse(raw)
	if err != nil {
		return URLSettings{}, fieldErr("Config.URL", "not a URL")
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
	return URLSettings{
		Network: o.Network, Addr: o.Addr, Username: o.Username,
		Password: o.Password, DB: o.DB, TLS: o.TLSConfig,
	}, nil
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
		return Config{}, &ConfigError{Field: "REDIS_URL", Reason: err.(*ConfigError).Reason}
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
