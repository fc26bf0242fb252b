package throttle

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEvery_OnePerIntervalUnderConcurrency(t *testing.T) {
	e := &Every{Interval: time.Hour}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e.Allow() {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 1 {
		t.Fatalf("%d events allowed in one interval, want 1", allowed.Load())
	}
	e.Reset() // as if the interval had passed
	if !e.Allow() {
		t.Fatal("not allowed after the interval")
	}
}
