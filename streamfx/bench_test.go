package streamfx

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
)

// BenchmarkPublish is one XADD of 256 bytes with its trace fields.
func BenchmarkPublish(b *testing.B) {
	s := newStreams(b, redistest.Start(b), Config{MaxLen: 10000})
	stream := redistest.Prefix(b) + "pub"
	ctx := context.Background()
	data := make([]byte, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Publish(ctx, stream, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConsume measures consume throughput: b.N messages published
// beforehand, then handled and acknowledged by one process (batches of
// BatchSize, Concurrency 1 and 8).
func BenchmarkConsume(b *testing.B) {
	for _, conc := range []int{1, 8} {
		b.Run(map[int]string{1: "concurrency=1", 8: "concurrency=8"}[conc], func(b *testing.B) {
			srv := redistest.Start(b)
			stream := redistest.Prefix(b) + "consume"
			pub := newStreams(b, srv, Config{})
			ctx := context.Background()
			for range b.N {
				if _, err := pub.Publish(ctx, stream, []byte("m")); err != nil {
					b.Fatal(err)
				}
			}
			s := newStreams(b, srv, Config{Concurrency: conc, BatchSize: 50})
			var n atomic.Int64
			done := make(chan struct{})
			total := int64(b.N)
			_ = s.Handle(stream, func(context.Context, Message) error {
				if n.Add(1) == total {
					close(done)
				}
				return nil
			})
			b.ResetTimer()
			began := time.Now()
			if err := s.Start(ctx); err != nil {
				b.Fatal(err)
			}
			<-done
			b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "msgs/s")
			b.StopTimer()
			_ = s.Stop(ctx)
		})
	}
}

// BenchmarkBaseline_RawXADD is the floor of a publish: a bare XADD of the
// same payload, without trace fields.
func BenchmarkBaseline_RawXADD(b *testing.B) {
	c := client(b, redistest.Start(b))
	stream := redistest.Prefix(b) + "raw"
	ctx := context.Background()
	data := make([]byte, 256)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: 10000, Approx: true, Values: []any{FieldData, data}}).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
