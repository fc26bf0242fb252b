package readmostly

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every key gets one value, made once, whoever asks first and however
// many ask at once.
func TestLoadOrCreate_OneValuePerKeyUnderConcurrency(t *testing.T) {
	t.Parallel()
	var m Map[[2]string, *int]
	var created atomic.Int64
	create := func(k [2]string) *int {
		created.Add(1)
		v := len(k[0]) + len(k[1])
		return &v
	}
	const workers, keys = 8, 300
	got := make([][]*int, workers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[w] = make([]*int, keys)
			for i := range keys {
				n := (i*7 + w*13) % keys // every worker, every key, in its own order
				got[w][n] = m.LoadOrCreate([2]string{"GET", fmt.Sprint("/r", n)}, create)
			}
		}()
	}
	close(start)
	wg.Wait()
	if created.Load() != keys || m.Len() != keys {
		t.Fatalf("created %d values for %d keys, Len %d", created.Load(), keys, m.Len())
	}
	for w := 1; w < workers; w++ {
		for i := range keys {
			if got[w][i] != got[0][i] {
				t.Fatalf("key %d: worker %d got another value than worker 0", i, w)
			}
		}
	}
}

// A key only in the dirty map is promoted to the lock-free read map after
// at most as many lookups as the map has keys, so a hot key added late does
// not take the lock on every request.
func TestLoadOrCreate_AHotKeyReachesTheReadMap(t *testing.T) {
	t.Parallel()
	var m Map[int, int]
	id := func(k int) int { return k }
	for k := range 100 {
		m.LoadOrCreate(k, id)
	}
	m.LoadOrCreate(1000, id)
	for range m.Len() {
		if _, ok := m.Load(1000); ok {
			return
		}
		m.LoadOrCreate(1000, id)
	}
	t.Fatalf("key still not in the read map after %d lookups", m.Len())
}

// Adding n keys costs O(n), not O(n²): a map copied whole on each
// addition allocated 2.3 GiB to add 6,000 keys of httpfx's route metrics.
func TestLoadOrCreate_AddingKeysIsLinear(t *testing.T) {
	var m Map[[2]string, int]
	keys := make([][2]string, 20000)
	for i := range keys {
		keys[i] = [2]string{"POST", fmt.Sprint("/api/v1/resource", i, "/{id}")}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i, k := range keys {
		m.LoadOrCreate(k, func([2]string) int { return i })
	}
	runtime.ReadMemStats(&after)
	// The final map holds 20,000 entries of 40 bytes; the copies made on
	// the way add at most a few times that. Copying on every addition
	// would allocate 20,000²/2 × 40 bytes, 8 GB.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Fatalf("adding %d keys allocated %d MiB", len(keys), grew>>20)
	}
	if m.Len() != len(keys) {
		t.Fatalf("Len %d", m.Len())
	}
	for i, k := range keys {
		if v := m.LoadOrCreate(k, func([2]string) int { return -1 }); v != i {
			t.Fatalf("key %d: %d", i, v)
		}
	}
}

func TestZeroMap(t *testing.T) {
	t.Parallel()
	var m Map[string, int]
	if v, ok := m.Load("a"); ok || v != 0 || m.Len() != 0 {
		t.Fatalf("zero map: %d %v, Len %d", v, ok, m.Len())
	}
}
