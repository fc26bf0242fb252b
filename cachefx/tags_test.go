package cachefx

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
)

// A tag set only ever grew: a hot tag on short-lived values kept every key
// ever tagged (its expiry kept being pushed out). Now adding a key prunes
// the members whose values have expired.
func TestTags_SetStaysBoundedByLiveValues(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{})
	ctx := context.Background()
	if err := c.Set(ctx, "long-1", []byte("v"), time.Hour, "hot"); err != nil { // keeps the set alive
		t.Fatal(err)
	}
	for i := range 200 {
		if err := c.Set(ctx, fmt.Sprint("short-", i), []byte("v"), 20*time.Millisecond, "hot"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // the duration under test: every short value has expired
	if err := c.Set(ctx, "long-2", []byte("v"), time.Hour, "hot"); err != nil {
		t.Fatal(err)
	}
	// Whatever the type of the set, it must hold the live values only.
	n, _ := srv.Client().ZCard(ctx, c.tagKey("hot")).Result()
	m, _ := srv.Client().SCard(ctx, c.tagKey("hot")).Result()
	if n+m != 2 {
		t.Fatalf("tag set holds %d members with two live values", n+m)
	}
}

// The tag sets were emptied before their values were deleted: when the
// deletion failed, InvalidateByTags returned an error, but calling it again
// found nothing to delete and the values lived on. Now the sets are emptied
// only after the values are gone.
func TestInvalidateByTags_RetryAfterAFailedDeleteDeletesEverything(t *testing.T) {
	t.Parallel()
	rdb := client(t, redistest.Start(t))
	g := newGate(false, commandIs("del"))
	g.fail = errors.New("connection reset (injected)")
	rdb.AddHook(g)
	c := newCache(t, rdb, Config{})
	ctx := context.Background()
	for i := range 5 {
		if err := c.Set(ctx, fmt.Sprint("k", i), []byte("v"), time.Hour, "t"); err != nil {
			t.Fatal(err)
		}
	}
	g.armed.Store(true)
	if _, err := c.InvalidateByTags(ctx, "t"); err == nil {
		t.Fatal("the deletion failed, InvalidateByTags returned nil")
	}
	n, err := c.InvalidateByTags(ctx, "t")
	if err != nil || n != 5 {
		t.Fatalf("retry = %d %v, want the 5 values deleted", n, err)
	}
	for i := range 5 {
		if _, found, _ := c.Get(ctx, fmt.Sprint("k", i)); found {
			t.Fatalf("k%d survived the retried invalidation", i)
		}
	}
}

// Rule 4: after an invalidation its members stay, retired, for the grace,
// then go. A retired member went only when a later addition pruned it: if
// the tag's last addition came within the grace, it stayed as long as the
// longest-lived member, and a later InvalidateByTags of the tag deleted a
// value stored again without the tag. Now an invalidation reads only the
// members still live, and prunes the others.
func TestInvalidateByTags_RetiredMemberIsNotFoundAfterTheGrace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, client(t, srv), Config{})
	direct := srv.Client()
	defer direct.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "old", []byte("v"), time.Hour, "brand"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InvalidateByTags(ctx, "brand"); err != nil {
		t.Fatal(err)
	}
	// Within the grace another value joins the tag: its addition prunes
	// nothing ("old" is retired until the grace ends).
	if err := c.Set(ctx, "new", []byte("v"), time.Hour, "brand"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(retiredGrace + 200*time.Millisecond) // the rule is about time
	// "old" is stored again, without the tag.
	if err := c.Set(ctx, "old", []byte("untagged"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if n, err := c.InvalidateByTags(ctx, "brand"); err != nil || n != 1 {
		t.Fatalf("InvalidateByTags = %d %v, want 1 (only \"new\")", n, err)
	}
	if v, found, err := c.Get(ctx, "old"); err != nil || !found || string(v) != "untagged" {
		t.Fatalf("a value stored without the tag was invalidated: %q %v %v", v, found, err)
	}
	if err := direct.ZScore(ctx, c.tagKey("brand"), "old").Err(); err == nil {
		t.Fatal("the retired member is still in the tag set after an invalidation past its grace")
	}
}

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
	misses, skipped := 0, 0
	const trials = 200
	for i := 0; i < trials; i++ {
		key, tag := fmt.Sprintf("k%d", i), fmt.Sprintf("t%d", i)
		if err := c.Set(ctx, key, []byte("old"), 5*time.Millisecond, tag); err != nil {
			t.Fatal(err)
		}
		score, err := direct.ZScore(ctx, c.tagKey(tag), key).Result()
		if errors.Is(err, redis.Nil) {
			// Gone before it could be looked at: on a loaded machine the 5 ms
			// passed between Set and ZSCORE (CI). Not this trial's case.
			skipped++
			continue
		}
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
		t.Fatalf("%d/%d: a value stored with the tag before InvalidateByTags began was still served after it returned nil", misses, trials-skipped)
	}
	if skipped > trials/2 {
		t.Fatalf("%d of %d values expired before the test could look at them: the case was not tested", skipped, trials)
	}
}
