package durations

import (
	"math"
	"testing"
	"time"
)

func TestAddAndMul_Saturate(t *testing.T) {
	const big = 200 * 365 * 24 * time.Hour
	if got := Add(big, big); got != math.MaxInt64 {
		t.Fatalf("Add(200y, 200y) = %v, want the largest Duration", got)
	}
	if got := Add(-big, -big); got != math.MinInt64 {
		t.Fatalf("Add(-200y, -200y) = %v, want the smallest Duration", got)
	}
	if got := Add(time.Second, -time.Millisecond); got != 999*time.Millisecond {
		t.Fatalf("Add(1s, -1ms) = %v", got)
	}
	if got := Mul(big, 2); got != math.MaxInt64 {
		t.Fatalf("Mul(200y, 2) = %v, want the largest Duration", got)
	}
	if got := Mul(-big, 2); got != math.MinInt64 {
		t.Fatalf("Mul(-200y, 2) = %v, want the smallest Duration", got)
	}
	if got := Mul(time.Second, 3); got != 3*time.Second {
		t.Fatalf("Mul(1s, 3) = %v", got)
	}
	if got := Mul(big, 0); got != 0 {
		t.Fatalf("Mul(200y, 0) = %v", got)
	}
}
