// Package safetext describes values that came from application code (a
// recovered panic, a handler's error) without letting their Error or
// String methods take the process down.
//
// fmt recovers a panic of an Error or String method, but panics again when
// printing the panic's value panics too, which ends the process.
package safetext

import "fmt"

// Of returns fmt.Sprint(v), or, when formatting v panics, a text that
// names v's type and says so, and false.
func Of(v any) (text string, ok bool) {
	defer func() {
		if recover() != nil { // the recovered value is not printed: it may be v again
			text, ok = fmt.Sprintf("<a %T whose Error or String method panics>", v), false
		}
	}()
	return fmt.Sprint(v), true
}

// Error returns err, or, when its Error method panics (a typed nil
// pointer returned as an error, say), an error whose text says so, naming
// err's type, and which unwraps to err. The method itself is called, not
// fmt, which prints a nil pointer's panic as "<nil>".
func Error(err error) error {
	if err == nil || readable(err) {
		return err
	}
	return broken{text: fmt.Sprintf("<a %T whose Error method panics>", err), err: err}
}

func readable(err error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_ = err.Error()
	return true
}

// broken stands for an error whose Error method panics.
type broken struct {
	text string
	err  error
}

func (e broken) Error() string { return e.text }
func (e broken) Unwrap() error { return e.err }
