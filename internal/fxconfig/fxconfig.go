// Package fxconfig lets every module take its Config from the Fx graph in
// either form an app may supply it: fx.Supply(cfg) or fx.Supply(&cfg).
package fxconfig

import (
	"fmt"
	"reflect"
)

// Pick returns the configuration an app supplied as *T (ptr) or as T (val),
// the zero T (all defaults) when neither. Supplying both is an error, so a
// configuration is never silently ignored.
func Pick[T any](ptr *T, val T) (T, error) {
	valSet := !reflect.ValueOf(&val).Elem().IsZero()
	switch {
	case ptr != nil && valSet:
		return val, fmt.Errorf("both a %T and a %T are in the Fx graph: supply one of them", val, ptr)
	case ptr != nil:
		return *ptr, nil
	}
	return val, nil
}
