package idempotencyfx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

var benchBody = `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`

func paymentHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/pay_123")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":"pay_123","amount":1250,"currency":"EUR","status":"succeeded"}`))
}

func benchService(b *testing.B, cfg Config) (*Service, http.Handler) {
	srv := redistest.Start(b)
	client, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	cfg.KeyPrefix = redistest.Prefix(b)
	cfg.DefaultTTL = time.Minute
	s, err := New(client, cfg)
	if err != nil {
		b.Fatal(err)
	}
	_ = s.Start(context.Background())
	b.Cleanup(func() { _ = s.Close(); _ = client.Close() })
	return s, s.Install(Idempotent()(http.HandlerFunc(paymentHandler)))
}

func benchRequest(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(benchBody))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

// BenchmarkBaseline_NoMiddleware is the handler alone: the yardstick for
// the overheads below.
func BenchmarkBaseline_NoMiddleware(b *testing.B) {
	h := http.HandlerFunc(paymentHandler)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), benchRequest(""))
	}
}

func BenchmarkNoKey(b *testing.B) {
	_, h := benchService(b, Config{})
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), benchRequest(""))
	}
}

func BenchmarkNewKey(b *testing.B) {
	_, h := benchService(b, Config{})
	var n atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), benchRequest("k"+strconv.FormatInt(n.Add(1), 10)))
	}
}

func BenchmarkReplay(b *testing.B) {
	_, h := benchService(b, Config{})
	h.ServeHTTP(httptest.NewRecorder(), benchRequest("replayed"))
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, benchRequest("replayed"))
		if w.Code != http.StatusCreated {
			b.Fatal(w.Code)
		}
	}
}

// BenchmarkWaiterWakeup: 50 duplicates wait for a first request; reports the
// p99 and max delay between the first's completion and each waiter's answer.
func BenchmarkWaiterWakeup(b *testing.B) {
	s, _ := benchService(b, Config{WaitTimeout: 10 * time.Second})
	var delays []time.Duration
	for i := 0; b.Loop(); i++ {
		key := "wake" + strconv.Itoa(i)
		release, entered := make(chan struct{}), make(chan struct{})
		var completed atomic.Int64
		first := s.Install(Idempotent()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-release
			completed.Store(time.Now().UnixNano())
			paymentHandler(w, r)
		})))
		go first.ServeHTTP(httptest.NewRecorder(), benchRequest(key))
		<-entered // the first request owns the key before the duplicates arrive
		var wg sync.WaitGroup
		answered := make([]int64, 50)
		waiter := s.Install(Idempotent()(http.HandlerFunc(paymentHandler)))
		for j := range answered {
			wg.Add(1)
			go func() {
				defer wg.Done()
				waiter.ServeHTTP(httptest.NewRecorder(), benchRequest(key))
				answered[j] = time.Now().UnixNano()
			}()
		}
		for s.notify.topicCount() == 0 { // the waiters have subscribed
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // let every waiter reach its wait
		close(release)
		wg.Wait()
		for _, a := range answered {
			delays = append(delays, time.Duration(a-completed.Load()))
		}
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(delays[len(delays)-1].Microseconds())/1000, "max-ms")
}
