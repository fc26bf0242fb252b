package keyslot

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The slots are Redis's own: CLUSTER KEYSLOT is answered by a standalone server too.
func TestOf_AgreesWithRedis(t *testing.T) {
	rdb := redistest.StartCluster(t, 3, 0).Client()
	for _, key := range []string{"", "a", "payments.created", "idempotency:k", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "{}x", "a{b"} {
		want, err := rdb.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Of(key); int64(got) != want {
			t.Errorf("Of(%q) = %d, Redis says %d", key, got, want)
		}
	}
	for _, slot := range []int{0, 1, 8000, Slots - 1} {
		if got := Of("x{" + ForSlot(slot) + "}y"); got != slot {
			t.Errorf("ForSlot(%d) names slot %d", slot, got)
		}
	}
}
