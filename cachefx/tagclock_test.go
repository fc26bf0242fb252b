package cachefx

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// InvalidateByTags "returns nil only if every value tagged before it began
// is gone". Reading only the members whose score (TIME-based, with
// microseconds) was ahead of TIME missed a value in the last millisecond
// of its life (Redis expires a key once its millisecond clock is past the
// expiry): the invalidation returned nil and the value was still served,
// in about half of 200 trials (found by an adversary). Members are read,
// and pruned, 1 ms past their score.
func TestInvalidateByTags_ValueInItsLastMillisecondIsStillFound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{})
	direct := srv.Client()
	defer direct.Close()
	ctx := context.Background()
	misses := 0
	const trials = 200
	for i := 0; i < trials; i++ {
		key, tag := fmt.Sprintf("k%d", i), fmt.Sprintf("t%d", i)
		if err := c.Set(ctx, key, []byte("old"), 5*time.Millisecond, tag); err != nil {
			t.Fatal(err)
		}
		score, err := direct.ZScore(ctx, c.tagKey(tag), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Wait until Redis's TIME has reached the member's score.
		for {
			now, err := direct.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if float64(now.UnixMicro())/1000 >= score {
				break
			}
		}
		n, err := c.InvalidateByTags(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		v, found, err := c.Get(ctx, key)
		if err == nil && found && n == 0 {
			misses++
			if misses <= 3 {
				t.Logf("trial %d: InvalidateByTags(%q) = 0, nil; then Get(%q) = %q (member score %.3f)", i, tag, key, v, score)
			}
		}
	}
	if misses > 0 {
		t.Fatalf("%d/%d: a value stored with the tag before InvalidateByTags began was still served after it returned nil", misses, trials)
	}
}
