package idempotencyfx

import (
	"time"

	"github.com/redisfx/redisfx"
)

// Stable error codes. They appear as the "code" member of problem responses
// and as redisfx.BaseError.Code; they never change.
const (
	CodeKeyReused         = "idempotency_key_reused"
	CodeInProgress        = "idempotency_request_in_progress"
	CodePreviousFailed    = "idempotency_previous_failed"
	CodeKeyInvalid        = "idempotency_key_invalid"
	CodeKeyRequired       = "idempotency_key_required"
	CodeStoreUnavailable  = "idempotency_store_unavailable"
	CodeBodyTooLarge      = "idempotency_body_too_large"
	CodeBodyTooDeep       = "idempotency_body_too_deep"
	CodeResponseNotStored = "idempotency_response_not_replayable"
)

// IdempotencyFingerprintMismatchError means the key was used before with
// different request data (HTTP 422). Remedy: resend the same data, or use a
// new key.
type IdempotencyFingerprintMismatchError struct {
	redisfx.BaseError
	Key string
}

// IdempotencyFailedError means the first attempt with this key failed and its
// failed record has not expired yet (HTTP 409). Remedy: a new key, or retry
// after RetryAfter.
type IdempotencyFailedError struct {
	redisfx.BaseError
	Key        string
	RetryAfter time.Duration
}

// IdempotencyTimeoutError means a request with this key is still in progress and
// did not finish within WaitTimeout (HTTP 409). Remedy: retry later with the
// same key; raise LockTimeout and WaitTimeout for slow handlers.
type IdempotencyTimeoutError struct {
	redisfx.BaseError
	Key        string
	RetryAfter time.Duration
}

// IdempotencyKeyRequiredError means the route requires a key and none was sent
// (HTTP 400).
type IdempotencyKeyRequiredError struct {
	redisfx.BaseError
	Header string
}

// IdempotencyKeyInvalidError means the key header is malformed: empty, longer than
// 255 characters, not visible ASCII, or sent more than once (HTTP 400).
type IdempotencyKeyInvalidError struct {
	redisfx.BaseError
	Header string
}

// IdempotencyStoreError means Redis could not be reached or answered with an
// error while ErrorPolicy is fail-closed (HTTP 500, with Retry-After). Err
// holds the cause: storefx.ErrCircuitOpen when the client's circuit breaker
// refused the command without sending it.
type IdempotencyStoreError struct {
	redisfx.BaseError
	// RetryAfter is when a retry with the same key may succeed: 1s.
	RetryAfter time.Duration
}

// IdempotencyBodyTooLargeError means the request body exceeds MaxBodyBytes, so it
// cannot be fingerprinted (HTTP 413).
type IdempotencyBodyTooLargeError struct {
	redisfx.BaseError
	Limit int64
}

// IdempotencyBodyTooDeepError means the JSON request body nests arrays and
// objects deeper than Limit (MaxJSONDepth), so it cannot be fingerprinted
// (HTTP 400).
type IdempotencyBodyTooDeepError struct {
	redisfx.BaseError
	Limit int
}

// IdempotencyNotReplayableError means the first request with this key completed
// but its response could not be recorded (streamed, hijacked, or larger
// than MaxResponseBytes), so it cannot be replayed and the handler will not
// run again for this key (HTTP 409).
type IdempotencyNotReplayableError struct {
	redisfx.BaseError
	Key        string
	RetryAfter time.Duration
}

// retryAfter gives DefaultErrorFilter the Retry-After of the errors that have one.
func (e *IdempotencyFailedError) retryAfter() time.Duration        { return e.RetryAfter }
func (e *IdempotencyTimeoutError) retryAfter() time.Duration       { return e.RetryAfter }
func (e *IdempotencyNotReplayableError) retryAfter() time.Duration { return e.RetryAfter }
func (e *IdempotencyStoreError) retryAfter() time.Duration         { return e.RetryAfter }

func newTimeout(key string, retry time.Duration) error {
	return &IdempotencyTimeoutError{Key: key, RetryAfter: retry, BaseError: redisfx.BaseError{Code: CodeInProgress,
		Message: "a request with this idempotency key is still in progress; retry later"}}
}

func newStoreError(err error) error {
	return &IdempotencyStoreError{RetryAfter: time.Second, BaseError: redisfx.BaseError{Code: CodeStoreUnavailable,
		Message: "the idempotency store is unavailable", Err: err}}
}
