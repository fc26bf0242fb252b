package ratelimitfx

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
)

// ExceededError is the error of a request over its limit. It renders as a
// 429 problem (code rate_limit_exceeded) with Retry-After unless an
// application error filter maps it otherwise.
type ExceededError struct {
	redisfx.BaseError
	Decision Decision
}

// Unwrap exposes the 429 problem to the error chain's default rendering.
func (e *ExceededError) Unwrap() error {
	p := httpfx.NewProblem(http.StatusTooManyRequests, e.Code, e.Message)
	p.RetryAfter = e.Decision.Reset
	return &httpfx.ProblemError{Problem: p}
}

// Limit is chi middleware enforcing rule on the routes it wraps:
//
//	r.With(limiter.Limit(ratelimitfx.Rule{Limit: 10, Window: time.Minute})).Post("/payments", h)
//
// Each answer carries RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset
// and RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-07). A request
// over the limit gets 429 application/problem+json with Retry-After and
// never reaches the handler. Without a Name, the rule's counters are named
// after the route ("POST /payments") when the middleware runs after routing
// (r.With, or r.Use inside a r.Route group), so one Rule value may guard
// several routes separately; mounted before routing (r.Use on the root
// router) it has one counter per key for every route ("default").
func (l *Limiter) Limit(rule Rule) func(http.Handler) http.Handler {
	named := rule.Name != ""
	rule = l.withDefaults(rule)
	policy := strconv.FormatInt(rule.Limit, 10) + ";w=" + strconv.FormatInt(int64((rule.Window+time.Second-1)/time.Second), 10)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := rule.Key(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			rr := rule
			if route := routeOf(r); !named && route != "" {
				rr.Name = r.Method + " " + route
			}
			d, err := l.Check(r.Context(), rr, key)
			if err != nil {
				if d.Allowed {
					next.ServeHTTP(w, r) // fail-open
					return
				}
				p := httpfx.NewProblem(http.StatusServiceUnavailable, ErrStoreUnavailable.Code, "Rate limiting is unavailable; try again shortly.")
				p.RetryAfter = time.Second
				httpfx.ErrorsFrom(r.Context()).Render(w, r, &httpfx.ProblemError{Problem: p})
				return
			}
			if !d.Allowed || !l.cfg.DisableHeaders {
				setHeaders(w.Header(), d, policy)
			}
			if !d.Allowed {
				httpfx.ErrorsFrom(r.Context()).Render(w, r, &ExceededError{
					BaseError: redisfx.BaseError{Code: "rate_limit_exceeded", Message: "Rate limit exceeded"},
					Decision:  d,
				})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Handler is Limit with the Config's default rule (keyed by client IP).
func (l *Limiter) Handler(next http.Handler) http.Handler { return l.Limit(Rule{})(next) }

func setHeaders(h http.Header, d Decision, policy string) {
	h.Set("RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	h.Set("RateLimit-Reset", strconv.FormatInt(int64((d.Reset+time.Second-1)/time.Second), 10))
	h.Set("RateLimit-Policy", policy)
}

// routeOf is the chi route pattern, or "" before routing (middleware
// mounted with r.Use). The raw path is never used: a client could vary it
// to get a fresh counter on every request.
func routeOf(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}

// IsExceeded reports whether err is a request over its limit.
func IsExceeded(err error) bool {
	var e *ExceededError
	return errors.As(err, &e)
}
