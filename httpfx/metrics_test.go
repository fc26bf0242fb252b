package httpfx

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The route metrics' children are cached in a map copied on each addition
// and read without a lock: requests arriving together for keys never seen
// must each be counted once, whichever of them adds the key.
func TestRequestMetrics_ConcurrentFirstRequestsAllCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := newRequestMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 8, 40
	methods := []string{"GET", "POST", "PUT"}
	codes := []int{200, 201, 409, 500}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range rounds { // every worker walks every key, in its own order
				for j := range len(methods) * len(codes) {
					n := (j + w + i) % (len(methods) * len(codes))
					m.observe(methods[n%len(methods)], fmt.Sprintf("/r%d", i%5), codes[n/len(methods)], time.Millisecond)
				}
			}
		}()
	}
	close(start)
	wg.Wait()

	if got := m.children.Len(); got != 5*len(methods)*len(codes) {
		t.Errorf("%d cached children, want %d", got, 5*len(methods)*len(codes))
	}
	for r := range 5 {
		for _, method := range methods {
			for _, code := range codes {
				c := m.requests.WithLabelValues(method, fmt.Sprintf("/r%d", r), fmt.Sprint(code))
				if got, want := testutil.ToFloat64(c), float64(workers*rounds/5); got != want {
					t.Errorf("%s /r%d %d counted %v times, want %v", method, r, code, got, want)
				}
			}
		}
	}
	if got, want := testutil.CollectAndCount(m.duration), 5*len(methods); got != want {
		t.Errorf("%d duration series, want %d", got, want)
	}
}
