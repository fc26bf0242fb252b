// Package ratelimitfx is a Redis rate limiter as an Fx module, exact under
// concurrency across processes: each check is one atomic script (INCR in a
// fixed window, or a sliding log). It offers chi middleware with per-route
// rules keyed by client IP (trusted-proxy aware), user, header or any
// function, answering 429 problem+json with Retry-After and the RateLimit-*
// headers, and a programmatic Check. Checks are traced (rate_limit.check)
// and measured (ratelimit_requests_total{status}, ratelimit_allowed_total,
// ratelimit_rejected_total).
package ratelimitfx

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/internal/throttle"
)

// Rule is a limit: Limit requests per Window for each key. Zero fields take
// the Config's defaults; Name (default: the route, "METHOD /pattern")
// separates the counters of different rules.
type Rule struct {
	Name   string
	Limit  int64
	Window time.Duration
	// Key picks the client; default ByIP.
	Key KeyFunc
}

// Decision is the outcome of one check.
type Decision struct {
	Allowed bool
	// Limit is the rule's limit; Current the requests counted in the
	// window, this one included; Remaining what is left (never negative).
	Limit, Current, Remaining int64
	// Reset is the time until the window frees capacity again.
	Reset time.Duration
	// Window is the rule's window.
	Window time.Duration
}

// ErrStoreUnavailable wraps a failed check; the Decision returned with it
// follows Config.ErrorPolicy.
var ErrStoreUnavailable = &redisfx.BaseError{Code: "rate_limit_unavailable", Message: "the rate limiter's store is unavailable"}

// Limiter checks requests against rules.
type Limiter struct {
	cfg     Config
	proxies []netip.Prefix
	rdb     redis.UniversalClient
	obs     *observer
	log     *zap.Logger
	warnLog throttle.Every // store failures, at most every 10s
}

// fixedWindowScript: KEYS[1] counter; ARGV[1] window ms. Returns
// {count, ms until reset}. The counter always has an expiry.
var fixedWindowScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
return {n, ttl}
`)

// slidingLogScript: KEYS[1] sorted set of allowed requests' times (ms);
// ARGV window ms, limit, a unique member. Returns {count with this request,
// ms until the oldest entry leaves, allowed 0/1}. Time is Redis's own, so
// every process agrees on it.
var slidingLogScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
local allowed = 0
if n < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  allowed = 1
end
redis.call('PEXPIRE', KEYS[1], window)
local reset = window
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] then reset = tonumber(oldest[2]) + window - now end
return {n + 1, reset, allowed}
`)

// New builds a Limiter without Fx.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Limiter, error) {
	cfg, proxies, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	o := options{log: zap.NewNop()}
	for _, f := range opts {
		f(&o)
	}
	obs, err := newObserver(o.registerer, o.tracer)
	if err != nil {
		return nil, err
	}
	return &Limiter{cfg: cfg, proxies: proxies, rdb: rdb, obs: obs, log: o.log,
		warnLog: throttle.Every{Interval: 10 * time.Second}}, nil
}

// Start preloads the check scripts, so that the first check pays no
// NOSCRIPT round trip. A failure is not fatal (scripts load on first use).
func (l *Limiter) Start(ctx context.Context) error {
	_ = scripts.Preload(ctx, l.rdb, fixedWindowScript, slidingLogScript)
	return nil
}

// Config is the limiter's effective configuration, defaults filled in.
func (l *Limiter) Config() Config { return l.cfg }

func (l *Limiter) withDefaults(rule Rule) Rule {
	if rule.Limit <= 0 {
		rule.Limit = l.cfg.Limit
	}
	if rule.Window <= 0 {
		rule.Window = l.cfg.Window
	}
	if rule.Key == nil {
		rule.Key = l.ByIP()
	}
	if rule.Name == "" {
		rule.Name = "default"
	}
	return rule
}

// Check counts one request of key against rule and decides. On a store
// failure it returns an error wrapping ErrStoreUnavailable with a Decision
// that follows the ErrorPolicy (Allowed under FailOpen).
func (l *Limiter) Check(ctx context.Context, rule Rule, key string) (Decision, error) {
	rule = l.withDefaults(rule)
	id := rule.Name + ":" + key
	ctx, span := l.obs.startCheck(ctx, id, rule)
	d, err := l.check(ctx, rule, l.cfg.KeyPrefix+id)
	if err != nil {
		d = Decision{Allowed: l.cfg.ErrorPolicy == FailOpen, Limit: rule.Limit, Window: rule.Window}
		err = fmt.Errorf("ratelimitfx: check %q: %w: %w", id, ErrStoreUnavailable, err)
		l.warn(err)
	}
	l.obs.endCheck(span, d, err)
	return d, err
}

func (l *Limiter) check(ctx context.Context, rule Rule, key string) (Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
	defer cancel()
	d := Decision{Limit: rule.Limit, Window: rule.Window}
	window := max(rule.Window.Milliseconds(), 1)
	var (
		res []int64
		err error
	)
	if l.cfg.Algorithm == SlidingLog {
		res, err = slidingLogScript.Run(ctx, l.rdb, []string{key}, window, rule.Limit, randid.Hex(8)).Int64Slice()
	} else {
		res, err = fixedWindowScript.Run(ctx, l.rdb, []string{key}, window).Int64Slice()
	}
	if err != nil {
		return d, err
	}
	if len(res) < 2 {
		return d, errors.New("unexpected script reply")
	}
	d.Current, d.Reset = res[0], time.Duration(res[1])*time.Millisecond
	d.Allowed = d.Current <= rule.Limit
	if len(res) == 3 {
		d.Allowed = res[2] == 1
	}
	d.Remaining = max(rule.Limit-d.Current, 0)
	return d, nil
}

// warn logs a store failure at most every 10s.
func (l *Limiter) warn(err error) {
	if !l.warnLog.Allow() {
		return
	}
	l.log.Warn("rate limiter: store unavailable", zap.String("policy", string(l.cfg.ErrorPolicy)), zap.Error(err))
}
