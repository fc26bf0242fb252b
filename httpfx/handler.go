package httpfx

import (
	"context"
	"net/http"
)

// HandlerFunc is a handler that may return an error, rendered through the
// error filter chain (see Errors); nothing must have been written before.
//
//	r.Post("/payments", httpfx.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
//		...
//		return err
//	}).ServeHTTP)
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// ServeHTTP runs f and renders its error.
func (f HandlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := f(w, r); err != nil {
		ErrorsFrom(r.Context()).Render(w, r, err)
	}
}

var fallbackErrors = NewErrors(nil)

// ErrorsFrom returns the error chain of the application serving ctx (put
// there by the router), or a chain with only the 500 default.
func ErrorsFrom(ctx context.Context) *Errors {
	if st := stateFrom(ctx); st != nil {
		return st.errors
	}
	return fallbackErrors
}
