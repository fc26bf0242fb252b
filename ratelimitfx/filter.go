package ratelimitfx

import (
	"errors"
	"net/http"
	"time"

	"github.com/redisfx/redisfx/httpfx"
)

// ErrorFilter maps the rate limiter's errors to problem responses. Module
// provides DefaultErrorFilter as this type and registers it in httpfx's
// error chain; change how refusals look with fx.Decorate.
type ErrorFilter func(err error, r *http.Request) (httpfx.Problem, bool)

// errorFilterOrder: after idempotency's (10), before the application's (100).
const errorFilterOrder = 20

// DefaultErrorFilter maps an *ExceededError to 429 rate_limit_exceeded
// with Retry-After, a *StoreUnavailableError to 503 rate_limit_unavailable
// with Retry-After: 1; never with the client's key or the store's error.
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
