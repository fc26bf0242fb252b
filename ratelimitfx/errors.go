package ratelimitfx

import (
	"errors"
	"net/http"
	"time"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
)

// Error codes: the "code" of the problems answered, and the BaseError.Code.
const (
	// CodeExceeded: the request is over its limit (429).
	CodeExceeded = "rate_limit_exceeded"
	// CodeUnavailable: Redis could not be reached to count the request.
	CodeUnavailable = "rate_limit_unavailable"
)

// ExceededError is a request over its limit (429 through DefaultErrorFilter).
type ExceededError struct {
	redisfx.BaseError
	// Decision is the check that refused the request.
	Decision Decision
}

func newExceededError(d Decision) *ExceededError {
	return &ExceededError{BaseError: redisfx.BaseError{Code: CodeExceeded, Message: "Rate limit exceeded"}, Decision: d}
}

// StoreUnavailableError is a check that could not reach Redis (Err holds
// the cause), under either ErrorPolicy; under FailClosed the middleware
// refuses the request with it (503).
type StoreUnavailableError struct {
	redisfx.BaseError
}

// ErrStoreUnavailable matches every StoreUnavailableError with errors.Is.
var ErrStoreUnavailable = &redisfx.BaseError{Code: CodeUnavailable, Message: "ratelimitfx: " + storeUnavailable}

const storeUnavailable = "the rate limiter's store is unavailable"

// Is reports whether target is ErrStoreUnavailable.
func (e *StoreUnavailableError) Is(target error) bool { return target == ErrStoreUnavailable }

func newStoreUnavailableError(check string, cause error) *StoreUnavailableError {
	return &StoreUnavailableError{redisfx.BaseError{Code: CodeUnavailable,
		Message: "ratelimitfx: check " + check + ": " + storeUnavailable, Err: cause}}
}

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
