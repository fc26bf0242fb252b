package idempotencyfx

import (
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis re-dials a dead node from a goroutine that sleeps a second
		// between tries and notices a closed pool only when it wakes; it is
		// left by the tests that kill servers and ends by itself.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func strconvI(n int64) string { return strconv.FormatInt(n, 10) }
