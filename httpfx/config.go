package httpfx

import (
	"cmp"
	"fmt"
	"time"

	"github.com/redisfx/redisfx"
)

// Config configures the HTTP server. Zero fields take the defaults below;
// a negative timeout or MaxHeaderBytes is invalid (see Validate).
type Config struct {
	// Addr is the listen address. Default ":8080".
	Addr string
	// ReadHeaderTimeout bounds reading request headers (slowloris). Default 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request. Default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response, from the end of the headers.
	// Default 60s; keep it above the idempotency WaitTimeout.
	WriteTimeout time.Duration
	// IdleTimeout bounds keep-alive idleness. Default 120s.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds draining in-flight requests on stop. Default
	// 10s; the drain leaves a third of fx.StopTimeout (at most 5s) to the
	// hooks after it: raise fx.StopTimeout with it.
	ShutdownTimeout time.Duration
	// MaxHeaderBytes bounds request headers. Default 1 MiB.
	MaxHeaderBytes int
	// DisableHealth, DisableReady and DisableMetrics unmount /healthz,
	// /readyz and /metrics (served only with metricsfx.Module).
	DisableHealth  bool
	DisableReady   bool
	DisableMetrics bool
}

func configError(field, reason string) error {
	return redisfx.NewConfigError("httpfx", "Config."+field, reason)
}

// Validate reports the first invalid field as a *redisfx.ConfigError naming
// it; Module fails fx.New with the same error.
func (c Config) Validate() error { _, err := c.withDefaults(); return err }

func (c Config) withDefaults() (Config, error) {
	c.Addr = cmp.Or(c.Addr, ":8080")
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"ReadHeaderTimeout", &c.ReadHeaderTimeout, 5 * time.Second},
		{"ReadTimeout", &c.ReadTimeout, 30 * time.Second},
		{"WriteTimeout", &c.WriteTimeout, 60 * time.Second},
		{"IdleTimeout", &c.IdleTimeout, 120 * time.Second},
		{"ShutdownTimeout", &c.ShutdownTimeout, 10 * time.Second},
	} {
		if *d.v < 0 {
			return c, configError(d.name, fmt.Sprintf("%v is negative", *d.v))
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MaxHeaderBytes < 0 {
		return c, configError("MaxHeaderBytes", fmt.Sprintf("%d is negative", c.MaxHeaderBytes))
	}
	c.MaxHeaderBytes = cmp.Or(c.MaxHeaderBytes, 1<<20)
	return c, nil
}
