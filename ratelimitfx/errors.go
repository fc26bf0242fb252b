package ratelimitfx

import "github.com/redisfx/redisfx"

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
