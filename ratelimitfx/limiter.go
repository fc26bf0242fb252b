package ratelimitfx

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/plugin"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/internal/throttle"
)

// Rule is a limit: Limit requests per Window for each key. Zero fields
// take the Config's defaults; Name defaults to the route in the middleware
// and to "default" in Check. An invalid Window or Limit is a
// *redisfx.ConfigError: from Check, or a panic from Limit.
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

// Limiter checks requests against rules.
type Limiter struct {
	cfg     Config
	proxies []netip.Prefix
	rdb     redis.UniversalClient
	obs     *observer
	log     *zap.Logger
	errors  *httpfx.Errors // renders refusals
	warnLog throttle.Every // store failures, at most every 10s
	// Caches of the routers' fixed routes: everyMethod (everyMethodKey ->
	// bool, see counterName), subRouters (subRouterKey -> chi.Routes, see
	// routingAt).
	everyMethod, subRouters sync.Map
}

// New builds a Limiter without Fx.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Limiter, error) {
	cfg, proxies, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if err := clientcheck.HonoursDeadlines("ratelimitfx", "Config.StoreTimeout", rdb); err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	o.Options = plugin.Apply("ratelimit", o.Options)
	obs, err := newObserver(o.Registerer, o.Tracer, cfg.KeyAttribute)
	if err != nil {
		return nil, err
	}
	errs := o.errors
	if errs == nil {
		errs = httpfx.NewErrors(o.Log, httpfx.RegisteredErrorFilter{Name: "ratelimit", Filter: httpfx.ErrorFilter(DefaultErrorFilter)})
	}
	return &Limiter{cfg: cfg, proxies: proxies, rdb: rdb, obs: obs, log: o.Log, errors: errs,
		warnLog: throttle.Every{Interval: 10 * time.Second}}, nil
}

// Start preloads the check scripts. A failure is not fatal.
func (l *Limiter) Start(ctx context.Context) error {
	_ = scripts.Preload(ctx, l.rdb, fixedWindowScript, slidingLogScript)
	return nil
}

func (l *Limiter) withDefaults(rule Rule) Rule {
	rule.Limit = cmp.Or(rule.Limit, l.cfg.Limit) // a negative one is refused by validRule
	rule.Window = cmp.Or(rule.Window, l.cfg.Window)
	rule.Name = cmp.Or(rule.Name, "default")
	if rule.Key == nil {
		rule.Key = l.ByIP()
	}
	return rule
}

// validRule refuses a rule (defaults filled in) Redis could not count exactly.
func validRule(rule Rule) error {
	if rule.Limit < 0 {
		return redisfx.NewConfigError("ratelimitfx", "Rule.Limit", fmt.Sprintf("rule %q: %d is negative", rule.Name, rule.Limit))
	}
	if reason := windowInvalid(rule.Window); reason != "" {
		return redisfx.NewConfigError("ratelimitfx", "Rule.Window", fmt.Sprintf("rule %q: %s", rule.Name, reason))
	}
	return nil
}

// Check counts one request of key against rule and decides. On a store
// failure it returns a *StoreUnavailableError with a Decision that follows
// the ErrorPolicy (Allowed under FailOpen). An invalid rule is not counted:
// a *redisfx.ConfigError, with a Decision that does not allow the request.
func (l *Limiter) Check(ctx context.Context, rule Rule, key string) (Decision, error) {
	rule = l.withDefaults(rule)
	if err := validRule(rule); err != nil {
		return Decision{Limit: rule.Limit, Window: rule.Window}, err
	}
	ctx, span := l.obs.startCheck(ctx, rule, key)
	d, err := l.check(ctx, rule, key)
	if err != nil {
		d = Decision{Allowed: l.cfg.ErrorPolicy == FailOpen, Limit: rule.Limit, Window: rule.Window}
		err = newStoreUnavailableError(strconv.Quote(rule.Name+":"+l.cfg.KeyAttribute.Value(key)), err)
		if l.warnLog.Allow() {
			l.log.Warn("rate limiter: store unavailable", zap.String("policy", string(l.cfg.ErrorPolicy)), zap.Error(err))
		}
	}
	l.obs.endCheck(span, d, err)
	return d, err
}

func (l *Limiter) check(ctx context.Context, rule Rule, key string) (Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
	defer cancel()
	counter := []string{l.counterKey(rule, key)}
	var cmd *redis.Cmd
	if l.cfg.Algorithm == SlidingLog {
		cmd = slidingLogScript.Run(ctx, l.rdb, counter, rule.Window.Milliseconds(), rule.Limit, randid.Hex(8))
	} else {
		cmd = fixedWindowScript.Run(ctx, l.rdb, counter, rule.Window.Milliseconds())
	}
	res, err := cmd.Int64Slice()
	if err != nil {
		return Decision{Limit: rule.Limit, Window: rule.Window}, err
	}
	return decide(l.cfg.Algorithm, rule, res), nil
}
