package cachefx

import (
	"context"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// BenchmarkGetHit_Redis is a hit answered by Redis: one GET round trip.
func BenchmarkGetHit_Redis(b *testing.B) {
	benchGetHit(b, Config{})
}

// BenchmarkGetHit_Local is a hit answered by the in-process first layer:
// no round trip.
func BenchmarkGetHit_Local(b *testing.B) {
	benchGetHit(b, Config{Local: LocalConfig{MaxEntries: 1000, TTL: time.Hour}})
}

func benchGetHit(b *testing.B, cfg Config) {
	c := newCache(b, client(b, redistest.Start(b)), cfg)
	ctx := context.Background()
	if err := c.Set(ctx, "k", make([]byte, 512), time.Hour); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, found, err := c.Get(ctx, "k"); !found || err != nil {
			b.Fatal(found, err)
		}
	}
}

// BenchmarkSet is a Set of 512 bytes with one tag (one pipelined round trip).
func BenchmarkSet(b *testing.B) {
	c := newCache(b, client(b, redistest.Start(b)), Config{})
	ctx := context.Background()
	v := make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Set(ctx, "k", v, time.Hour, "t"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaseline_RawGET is the floor the cache's Redis hit is compared
// with: a bare go-redis GET of the same value.
func BenchmarkBaseline_RawGET(b *testing.B) {
	c := client(b, redistest.Start(b))
	ctx := context.Background()
	key := redistest.Prefix(b) + "raw"
	c.Set(ctx, key, make([]byte, 512), time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Get(ctx, key).Bytes(); err != nil {
			b.Fatal(err)
		}
	}
}
