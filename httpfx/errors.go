package httpfx

import (
	"context"
	"errors"
	"net/http"

	"go.uber.org/fx"
	"go.uber.org/zap"
)

// ErrorFilter maps an error to a problem response, or returns false for
// errors it does not know (the next filter is asked).
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
	return fx.Annotate(func() RegisteredErrorFilter {
		return RegisteredErrorFilter{Name: name, Order: 100, Filter: f}
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

// StatusClientClosedRequest (499, nginx's convention) is what Render writes,
// without a body, for a handler error that is the client going away.
const StatusClientClosedRequest = 499

// Render writes the problem for err (only StatusClientClosedRequest when
// the client has gone away), after telling the first ErrorNoter down w's
// Unwrap chain which error the answer renders.
func (e *Errors) Render(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		w.WriteHeader(StatusClientClosedRequest) // no body: nobody reads the answer
		return
	}
	noteError(w, err)
	e.Problem(err, r).Write(w)
}

// ErrorNoter is a response writer that wants to know which error the answer
// written to it renders (idempotencyfx's recorder does).
type ErrorNoter interface {
	NoteError(err error)
}

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

// ProblemError is an error that carries its own problem, rendered as is:
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
