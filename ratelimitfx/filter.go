package ratelimitfx

import (
	"errors"
	"net/http"
	"time"

	"github.com/redisfx/redisfx/httpfx"
)

// ErrorFilter maps the rate limiter's errors to problem responses. Module
// provides DefaultErrorFilter as this type and registers it in httpfx's
// error chain (after idempotency's, before the application's filters); an
// application changes how refusals look by decorating it:
//
//	fx.Decorate(func(next ratelimitfx.ErrorFilter) ratelimitfx.ErrorFilter {
//		return func(err error, r *http.Request) (httpfx.Problem, bool) {
//			p, ok := next(err, r)
//			if ok {
//				p.Type = "https://docs.example.com/problems/" + p.Code
//			}
//			return p, ok
//		}
//	})
type ErrorFilter func(err error, r *http.Request) (httpfx.Problem, bool)

// errorFilterOrder is the filter's place in httpfx's chain: library
// filters use 0-99 (idempotency is 10), the application's default to 100.
const errorFilterOrder = 20

// DefaultErrorFilter is the built-in mapping: an *ExceededError is 429
// rate_limit_exceeded with Retry-After (the time until the window frees
// capacity), a *StoreUnavailableError is 503 rate_limit_unavailable with
// Retry-After: 1. The details are fixed texts: a problem never carries the
// client's key or the store's error. Other errors are left to the next
// filter.
func DefaultErrorFilter(err error, _ *http.Request) (httpfx.Problem, bool) {
	var exceeded *ExceededError
	if errors.As(err, &exceeded) {
		p := httpfx.NewProblem(http.StatusTooManyRequests, CodeExceeded, "Rate limit exceeded")
		p.RetryAfter = exceeded.Decision.Reset
		return p, true
	}
	var unavailable *StoreUnavailableError
	if errors.As(err, &unavailable) {
		p := httpfx.NewProblem(http.StatusServiceUnavailable, CodeUnavailable, "Rate limiting is unavailable; try again shortly.")
		p.RetryAfter = time.Second
		return p, true
	}
	return httpfx.Problem{}, false
}
