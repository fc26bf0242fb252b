package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the benchmarks' apps (Fx, Redis clients, the
// private redis-server) leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
