// Package durations adds and multiplies configured durations without
// overflow: a result past the largest time.Duration is that largest value
// (about 292 years), never a negative duration that reads as "already over".
package durations

import (
	"math"
	"time"
)

// Add returns a+b, saturated at the largest (or smallest) time.Duration.
func Add(a, b time.Duration) time.Duration {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// Mul returns d*n for n >= 0, saturated at the largest time.Duration.
func Mul(d time.Duration, n int64) time.Duration {
	if n == 0 || d == 0 {
		return 0
	}
	if d > 0 && d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	if d < 0 && d < math.MinInt64/time.Duration(n) {
		return math.MinInt64
	}
	return d * time.Duration(n)
}
