package storefx

import (
	"errors"
	"net/url"
	"os"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
)

// ParseURL parses a redis://, rediss:// or unix:// URL with redis.ParseURL.
// An error is a *redisfx.ConfigError naming Config.URL that never repeats
// the URL's password.
func ParseURL(raw string) (*redis.Options, error) {
	return parseURL(raw, redis.ParseURL)
}

// parseURL parses raw with one of go-redis's URL parsers, with errors that
// do not repeat the credentials.
func parseURL[T any](raw string, parse func(string) (*T, error)) (*T, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || strings.ContainsAny(scheme, ":/@") {
		return nil, fieldErr("Config.URL", "not a URL: write redis://[user:password@]host:port/db, rediss://… or unix:///path")
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 && strings.Contains(rest[i:], "@") {
		// A password holding '/', '?' or '#' would be read as host, path and
		// options, and errors would repeat it.
		return nil, fieldErr("Config.URL", "'@' after the host: a user name or password holding '/', '?' or '#' "+
			"must be percent-encoded (%%2F, %%3F, %%23); the URL is not shown, it may hold credentials")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, and so without its credentials
		}
		return nil, fieldErr("Config.URL", "%v", err)
	}
	o, err := parse(raw)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "redis: ")
		if p, _ := u.User.Password(); p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
		return nil, fieldErr("Config.URL", "%s", msg)
	}
	return o, nil
}

// fromURL sets every field of *o that the URL raw sets to a non-zero value.
func fromURL[T any](raw string, o *T, parse func(string) (*T, error)) error {
	if raw == "" {
		return nil
	}
	p, err := parseURL(raw, parse)
	if err != nil {
		return err
	}
	dst, src := reflect.ValueOf(o).Elem(), reflect.ValueOf(p).Elem()
	for i := range src.NumField() {
		if f := src.Field(i); src.Type().Field(i).IsExported() && !f.IsZero() {
			dst.Field(i).Set(f)
		}
	}
	return nil
}

// FromEnv returns the configuration an application gets from its environment:
// REDIS_URL when set, else DefaultConfig. An invalid REDIS_URL is an error
// naming the variable.
func FromEnv() (Config, error) {
	cfg := Config{URL: os.Getenv("REDIS_URL")}
	if cfg.URL == "" {
		return DefaultConfig(), nil
	}
	var ce *redisfx.ConfigError
	if err := cfg.Validate(); errors.As(err, &ce) {
		return Config{}, redisfx.NewConfigError("storefx", "REDIS_URL", ce.Reason)
	} else if err != nil {
		return Config{}, err
	}
	return cfg, nil
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
