package storefx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// startErr starts an app with cfg and returns how long start-up took and
// its error.
func startErr(t *testing.T, cfg storefx.Config) (took time.Duration, err error) {
	t.Helper()
	app := fx.New(storefx.Module, fx.Supply(cfg), fx.Invoke(func(redis.UniversalClient) {}), fx.NopLogger)
	if err := app.Err(); err != nil {
		t.Fatalf("fx.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	began := time.Now()
	err = app.Start(ctx)
	took = time.Since(began)
	if err == nil {
		_ = app.Stop(ctx)
	}
	return took, err
}

// When Redis answers the connection's set-up with an error (SELECT of a
// database it does not have, a wrong or missing password, an ACL user
// without the right), start-up called the server unreachable and retried
// for the whole ConnectTimeout, naming no field. It fails at once now,
// saying Redis answered and refused, with a *redisfx.ConfigError naming
// the field to fix, and never repeating the password.
func TestStartFailsAtOnceWhenRedisRefusesTheConnection(t *testing.T) {
	t.Parallel()
	const password, wrong = "s3cret-Tr0ub4dor", "wr0ng-Tr0ub4dor"
	plain := redistest.StartPrivate(t,
		// bob may do everything but SELECT.
		redistest.WithArgs("--user", "bob", "on", ">"+password, "~*", "&*", "+@all", "-select"))
	locked := redistest.StartPrivate(t, redistest.WithArgs("--requirepass", password))
	tests := []struct {
		name  string
		cfg   storefx.Config
		field string // "": no field is named
		reply string // the start of Redis's answer, at the end of the error
	}{
		{"db the server lacks", storefx.Config{Addrs: []string{plain.Addr()}, DB: 16}, "Config.DB", "ERR DB index is out of range"},
		{"url db the server lacks", storefx.Config{URL: plain.URL() + "/2147483647"}, "Config.URL", "ERR DB index is out of range"},
		{"no password", storefx.Config{Addrs: []string{locked.Addr()}}, "Config.Password", "NOAUTH "},
		{"no password, db", storefx.Config{Addrs: []string{locked.Addr()}, DB: 3}, "Config.Password", "NOAUTH "},
		{"wrong password", storefx.Config{Addrs: []string{locked.Addr()}, Password: wrong}, "Config.Password", "WRONGPASS "},
		{"wrong password in url", storefx.Config{URL: "redis://:" + wrong + "@" + locked.Addr() + "/0"}, "Config.URL", "WRONGPASS "},
		{"wrong user", storefx.Config{Addrs: []string{plain.Addr()}, Username: "alice", Password: password}, "Config.Password", "WRONGPASS "},
		{"db beyond SELECT's range", storefx.Config{Addrs: []string{plain.Addr()}, DB: 1 << 31}, "Config.DB", "ERR value is out of range"},
		{"url db beyond SELECT's range", storefx.Config{URL: plain.URL() + "/99999999999"}, "Config.URL", "ERR value is out of range"},
		// Any other refusal fails at once too, ending with Redis's reply.
		{"acl user may not select", storefx.Config{Addrs: []string{plain.Addr()}, Username: "bob", Password: password, DB: 1},
			"", "NOPERM "},
		{"not a cluster", storefx.Config{Addrs: []string{plain.Addr()}, Cluster: true}, "Config.Cluster", "ERR This instance has cluster support disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.ConnectTimeout = 5 * time.Second
			took, err := startErr(t, tt.cfg)
			if err == nil {
				t.Fatal("started")
			}
			t.Log(err)
			msg := err.Error()
			if took > 2*time.Second {
				t.Errorf("start-up took %v to fail on a refusal that retrying cannot change: %v", took, err)
			}
			if !strings.Contains(msg, "answered and refused the connection") || strings.Contains(msg, "unreachable") {
				t.Errorf("error does not say Redis answered and refused: %v", err)
			}
			var cfgErr *redisfx.ConfigError
			if named := errors.As(err, &cfgErr); named != (tt.field != "") || named && cfgErr.Field != tt.field {
				t.Errorf("error %v, want a *redisfx.ConfigError naming %q", err, tt.field)
			}
			var reply redis.Error
			if !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), tt.reply) || !strings.HasSuffix(msg, reply.Error()) {
				t.Errorf("error %v does not end with Redis's answer %q…", err, tt.reply)
			}
			if strings.Contains(msg, password) || strings.Contains(msg, wrong) {
				t.Errorf("error repeats a password: %v", err)
			}
		})
	}
	t.Run("right password and database", func(t *testing.T) {
		t.Parallel()
		if _, err := startErr(t, storefx.Config{URL: "redis://:" + password + "@" + locked.Addr() + "/15"}); err != nil {
			t.Fatal(err)
		}
		if _, err := startErr(t, storefx.Config{Addrs: []string{plain.Addr()}, Username: "bob", Password: password}); err != nil {
			t.Fatal(err)
		}
	})
}

// A server that answers but is not ready (here BUSY: a script runs past
// lua-time-limit; LOADING and the others are alike) may become ready
// within ConnectTimeout: start-up retries it, and if it stays so, says
// that Redis answered but was not ready, not that it is unreachable.
func TestStartReportsABusyServerAsNotReady(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t, redistest.WithArgs("--lua-time-limit", "10"))
	script := srv.Client()
	done := make(chan error, 1)
	go func() { done <- script.Eval(context.Background(), "while true do end", nil).Err() }()
	killer := srv.Client()
	t.Cleanup(func() {
		// The server is killed after this (cleanups run last first); the
		// script's caller must have returned by then.
		for killer.Do(context.Background(), "SCRIPT", "KILL").Err() != nil {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		<-done
	})
	probe := srv.Client()
	deadline := time.Now().Add(5 * time.Second)
	for err := probe.Ping(context.Background()).Err(); err == nil || !strings.HasPrefix(err.Error(), "BUSY "); err = probe.Ping(context.Background()).Err() {
		if time.Now().After(deadline) {
			t.Fatalf("the server is not busy: PING = %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took, err := startErr(t, storefx.Config{Addrs: []string{srv.Addr()}, ConnectTimeout: 400 * time.Millisecond})
	if err == nil {
		t.Fatal("started")
	}
	t.Log(err)
	if took < 400*time.Millisecond {
		t.Errorf("gave up after %v, before ConnectTimeout, on a server that may become ready", took)
	}
	if !strings.Contains(err.Error(), "answered but was not ready") || strings.Contains(err.Error(), "unreachable") ||
		!strings.Contains(err.Error(), "): BUSY Redis is busy running a script") {
		t.Errorf("error does not say Redis answered but was not ready: %v", err)
	}
}

// With MasterName, the Sentinels' refusals (their own password, a master
// name they do not know, an address that is no Sentinel) came back joined
// in go-redis's "all sentinels … are unreachable", which would have been
// blamed on Config.Password. Each names its own field, at once.
func TestStartFailsAtOnceWhenTheSentinelsRefuse(t *testing.T) {
	t.Parallel()
	const password, sentinelPassword = "m4ster-Tr0ub4dor", "s3ntinel-Tr0ub4dor"
	master := redistest.StartPrivate(t, redistest.WithArgs("--requirepass", password))
	open := redistest.StartSentinel(t, master.Addr(), "sentinel auth-pass mymaster "+password)
	locked := redistest.StartSentinel(t, master.Addr(), "sentinel auth-pass mymaster "+password, "requirepass "+sentinelPassword)
	tests := []struct {
		name  string
		cfg   storefx.Config
		field string
	}{
		{"unknown master", storefx.Config{Addrs: []string{open}, MasterName: "nosuch", Password: password}, "Config.MasterName"},
		{"no sentinel password", storefx.Config{Addrs: []string{locked}, MasterName: "mymaster", Password: password}, "Config.SentinelPassword"},
		{"wrong sentinel password", storefx.Config{Addrs: []string{locked}, MasterName: "mymaster", Password: password,
			SentinelPassword: "wr0ng-Tr0ub4dor"}, "Config.SentinelPassword"},
		{"master's password given to the sentinel only", storefx.Config{Addrs: []string{locked}, MasterName: "mymaster",
			SentinelPassword: sentinelPassword}, "Config.Password"},
		{"wrong master password", storefx.Config{Addrs: []string{open}, MasterName: "mymaster", Password: "wr0ng-Tr0ub4dor"}, "Config.Password"},
		{"not a sentinel", storefx.Config{Addrs: []string{master.Addr()}, MasterName: "mymaster", SentinelPassword: password}, "Config.Addrs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.ConnectTimeout = 5 * time.Second
			took, err := startErr(t, tt.cfg)
			if err == nil {
				t.Fatal("started")
			}
			t.Log(err)
			if took > 2*time.Second {
				t.Errorf("start-up took %v to fail on a refusal that retrying cannot change", took)
			}
			var cfgErr *redisfx.ConfigError
			if !errors.As(err, &cfgErr) || cfgErr.Field != tt.field || !strings.Contains(err.Error(), "answered and refused the connection") {
				t.Errorf("error %v, want Redis answered and refused, and a *redisfx.ConfigError naming %s", err, tt.field)
			}
			for _, p := range []string{password, sentinelPassword, "wr0ng-Tr0ub4dor"} {
				if strings.Contains(err.Error(), p) {
					t.Errorf("error repeats a password: %v", err)
				}
			}
		})
	}
	t.Run("right passwords", func(t *testing.T) {
		t.Parallel()
		if _, err := startErr(t, storefx.Config{Addrs: []string{locked}, MasterName: "mymaster", Password: password,
			SentinelPassword: sentinelPassword}); err != nil {
			t.Fatal(err)
		}
	})
}
