package ratelimitfx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// BenchmarkCheck is one programmatic check: one script call.
func BenchmarkCheck(b *testing.B) {
	for _, alg := range []Algorithm{FixedWindow, SlidingLog} {
		b.Run(string(alg), func(b *testing.B) {
			l := newLimiter(b, redistest.Start(b), Config{Algorithm: alg, Limit: 1 << 40, Window: time.Second})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Check(ctx, Rule{}, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMiddleware is a request through the middleware (headers included).
func BenchmarkMiddleware(b *testing.B) {
	l := newLimiter(b, redistest.Start(b), Config{Limit: 1 << 40})
	h := l.Limit(Rule{Name: "bench"})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// BenchmarkBaseline_RawINCR is the floor of a check: one bare INCR.
func BenchmarkBaseline_RawINCR(b *testing.B) {
	l := newLimiter(b, redistest.Start(b), Config{})
	ctx := context.Background()
	key := redistest.Prefix(b) + "raw"
	b.ReportAllocs()
	for b.Loop() {
		if err := l.rdb.Incr(ctx, key).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
