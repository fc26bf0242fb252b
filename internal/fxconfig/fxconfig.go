// Package fxconfig lets every module take its Config from the Fx graph in
// either form an app may supply it: fx.Supply(cfg) or fx.Supply(&cfg).
package fxconfig

import (
	"fmt"
	"reflect"
	"time"
)

// Pick returns the configuration an app supplied as *T (ptr) or as T (val);
// a module's Params take both, optional. The zero T, which every module
// reads as "all defaults", is returned when neither was supplied. Supplying
// both is an error that names the two types, so a configuration is never
// silently ignored.
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

// MaxDuration is the longest duration a module's Config takes (100 years).
// Twice it, plus a margin, still fits a time.Duration (about 292 years):
// the arithmetic on configured durations (a lease's 2×LockTimeout, a TTL
// plus a marker's life) cannot overflow into a negative duration, which
// read as "already over" (an adversary's LockTimeout of 150 years gave up
// a handler's outcome at once and left its key in progress for 300 years).
const MaxDuration = 100 * 365 * 24 * time.Hour

// TooLong says why d is refused as a configured duration, or "" when it is
// taken (at most MaxDuration).
func TooLong(d time.Duration) string {
	if d > MaxDuration {
		return fmt.Sprintf("%v is above the longest duration taken, 100 years (876000h)", d)
	}
	return ""
}
