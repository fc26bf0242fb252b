package idempotencyfx

import (
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func strconvI(n int64) string { return strconv.FormatInt(n, 10) }
