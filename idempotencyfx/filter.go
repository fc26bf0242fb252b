package idempotencyfx

import (
	"cmp"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
)

// ErrorFilter maps idempotency errors to problem responses. Module puts
// DefaultErrorFilter first in httpfx's chain as this type; decorate it with
// fx.Decorate to change statuses or payloads (see the README).
type ErrorFilter func(err error, r *http.Request) (httpfx.Problem, bool)

// statusOf is the HTTP status of each error code.
var statusOf = map[string]int{
	CodeKeyReused:         http.StatusUnprocessableEntity,
	CodeInProgress:        http.StatusConflict,
	CodePreviousFailed:    http.StatusConflict,
	CodeResponseNotStored: http.StatusConflict,
	CodeKeyInvalid:        http.StatusBadRequest,
	CodeKeyRequired:       http.StatusBadRequest,
	CodeBodyTooLarge:      http.StatusRequestEntityTooLarge,
	CodeBodyTooDeep:       http.StatusBadRequest,
	CodeStoreUnavailable:  http.StatusInternalServerError,
}

// DefaultErrorFilter is the built-in mapping of the idempotency errors
// (docs/idempotency.md, "Errors"); other errors are left to the next filter.
func DefaultErrorFilter(err error, _ *http.Request) (httpfx.Problem, bool) {
	var base *redisfx.BaseError
	if !errors.As(err, &base) || !strings.HasPrefix(base.Code, "idempotency_") {
		return httpfx.Problem{}, false
	}
	status := cmp.Or(statusOf[base.Code], http.StatusInternalServerError)
	detail := base.Message
	if base.Code == CodeStoreUnavailable {
		detail = "The request could not be checked for duplicates, so it was not processed. Retry with the same key."
	}
	p := httpfx.NewProblem(status, base.Code, detail)
	var retry interface{ retryAfter() time.Duration }
	if errors.As(err, &retry) {
		p.RetryAfter = retry.retryAfter()
	}
	if status == http.StatusConflict && p.RetryAfter <= 0 {
		p.RetryAfter = 1
	}
	return p, true
}
