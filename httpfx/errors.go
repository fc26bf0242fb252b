package httpfx

import (
	"context"
	"errors"
	"net/http"

	"go.uber.org/fx"
	"go.uber.org/zap"
)

// ErrorFilter maps an error to a problem response. It returns false for
// errors it does not know, so that the next filter is asked. Filters are the
// one place where errors become HTTP responses.
type ErrorFilter func(err error, r *http.Request) (Problem, bool)

// ErrorFilterGroup is the value group of registered error filters.
const ErrorFilterGroup = "redisfx.http.error_filters"

// RegisteredErrorFilter is an ErrorFilter with its place in the chain.
// Filters run in ascending Order; library filters use 0-99, application
// filters default to 100, and the 500 default always runs last.
type RegisteredErrorFilter struct {
	Name   string
	Order  int
	Filter ErrorFilter
}

// AsErrorFilter registers an application error filter (Order 100, after the
// library's own filters):
//
//	fx.Provide(httpfx.AsErrorFilter("payments", myFilter))
func AsErrorFilter(name string, f ErrorFilter) any {
	return ErrorFilterAt(name, 100, f)
}

// ErrorFilterAt registers f at a given order. Modules use it to put their
// filter before the application's.
func ErrorFilterAt(name string, order int, f ErrorFilter) any {
	return fx.Annotate(func() RegisteredErrorFilter {
		return RegisteredErrorFilter{Name: name, Order: order, Filter: f}
	}, fx.ResultTags(`group:"`+ErrorFilterGroup+`"`))
}

// Errors renders errors through the filter chain. The last resort is a 500
// problem whose detail never reveals the error text (it is logged instead).
type Errors struct {
	filters []RegisteredErrorFilter
	log     *zap.Logger
}

// NewErrors builds the chain from registered filters, sorted by Order then Name.
func NewErrors(log *zap.Logger, filters ...RegisteredErrorFilter) *Errors {
	fs := ordered(filters, func(f RegisteredErrorFilter) (int, string) { return f.Order, f.Name })
	if log == nil {
		log = zap.NewNop()
	}
	return &Errors{filters: fs, log: log}
}

// Problem maps err to a problem through the chain.
func (e *Errors) Problem(err error, r *http.Request) Problem {
	for _, f := range e.filters {
		if f.Filter == nil {
			continue
		}
		if p, ok := f.Filter(err, r); ok {
			return p
		}
	}
	var pe *ProblemError
	if errors.As(err, &pe) {
		return pe.Problem
	}
	e.log.Error("unhandled error", zap.Error(err), zap.String("method", r.Method), zap.String("path", r.URL.Path))
	return NewProblem(http.StatusInternalServerError, "internal_error", "The server could not complete the request.")
}

// StatusClientClosedRequest (499, nginx's convention) is the status Render
// gives a handler error that is the client going away (context.Canceled
// with the request's context done). Only the status is written, and nobody
// reads it; it is what the access log and the request metrics show instead
// of an implicit 200, and idempotencyfx records it as a failed outcome.
const StatusClientClosedRequest = 499

// Render writes the problem for err. When err is the client having gone
// away, it writes only StatusClientClosedRequest.
//
// Before writing, Render tells the first writer down w's Unwrap chain that
// implements ErrorNoter which error the answer renders.
func (e *Errors) Render(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		w.WriteHeader(StatusClientClosedRequest) // no body: nobody reads the answer
		return
	}
	noteError(w, err)
	e.Problem(err, r).Write(w)
}

// ErrorNoter is a response writer that wants to know which error the answer
// written to it renders, where the status alone cannot say: idempotencyfx's
// recorder does not keep as a request's outcome an idempotency error of
// other work that asks the client to retry later. Render calls NoteError
// before it writes the problem.
type ErrorNoter interface {
	NoteError(err error)
}

// noteError tells the first ErrorNoter down w's Unwrap chain about err.
func noteError(w http.ResponseWriter, err error) {
	for {
		if n, ok := w.(ErrorNoter); ok {
			n.NoteError(err)
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// ProblemError is an error that carries its own problem; the default filter
// renders it as is. Handlers use it for ordinary 4xx answers:
//
//	return &httpfx.ProblemError{Problem: httpfx.NewProblem(400, "invalid_body", "amount must be positive")}
type ProblemError struct {
	Problem Problem
}

// Error implements error.
func (e *ProblemError) Error() string {
	if e.Problem.Detail != "" {
		return e.Problem.Detail
	}
	return e.Problem.Title
}
