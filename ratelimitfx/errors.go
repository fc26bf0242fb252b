package ratelimitfx

import (
	"errors"

	"github.com/redisfx/redisfx"
)

// Stable error codes: the "code" member of the problems the rate limiter
// answers with, and the redisfx.BaseError.Code of its errors.
const (
	// CodeExceeded: the request is over its limit (429).
	CodeExceeded = "rate_limit_exceeded"
	// CodeUnavailable: Redis could not be reached to count the request
	// (503 under FailClosed).
	CodeUnavailable = "rate_limit_unavailable"
)

// ExceededError is the error of a request over its limit. It is a plain
// error: DefaultErrorFilter, registered in httpfx's chain by Module, maps
// it to 429 problem+json with Retry-After.
type ExceededError struct {
	redisfx.BaseError
	// Decision is the check that refused the request.
	Decision Decision
}

func newExceededError(d Decision) *ExceededError {
	return &ExceededError{BaseError: redisfx.BaseError{Code: CodeExceeded, Message: "Rate limit exceeded"}, Decision: d}
}

// StoreUnavailableError is a check that could not reach Redis; Err holds
// the cause. Check returns it under either ErrorPolicy; under FailClosed the
// middleware refuses the request with it, which DefaultErrorFilter maps to
// 503 problem+json with Retry-After: 1. errors.Is(err, ErrStoreUnavailable)
// reports it.
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

// IsExceeded reports whether err is a request over its limit.
func IsExceeded(err error) bool {
	var e *ExceededError
	return errors.As(err, &e)
}
