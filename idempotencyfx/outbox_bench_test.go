package idempotencyfx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/streamfx"
)

// BenchmarkOutbox_NewKeyCPU is what one event costs a new-key request
// (issue 38: at most 10 % more CPU than without one). One Service with
// streams serves blocks of outboxBenchBlock new-key requests, alternately
// without an event and with one Emit, and after each block waits until
// the relay has delivered its events, so the relay's work is in the block
// it belongs to. A third kind, commit-only, emits one event through a
// Service whose relay is stopped: the commit's share of the cost, without
// the delivery's. A fourth, publish, is the announcement as the payments
// example made it before the outbox: a streamfx Publish in the handler.
// Per request it reports the CPU time (user and system) of
// this process (getrusage) and of the private redis-server (INFO cpu), for
// each kind, and the ratios to the requests without an event: the kinds
// alternate in the same run, so a loaded machine moves them alike. One
// b.Loop iteration is one block of each kind. The request goroutines carry
// the profiler label kind (plain, event, commit-only, publish) for -cpuprofile;
// OUTBOX_BENCH_STATS=1 logs Redis's commandstats at the end.
func BenchmarkOutbox_NewKeyCPU(b *testing.B) {
	b.Run("serial", func(b *testing.B) { benchOutbox(b, 1) })
	// Requests from 16 clients at once: the relay delivers the records
	// committed meanwhile in one round trip.
	b.Run("clients=16", func(b *testing.B) { benchOutbox(b, 16) })
}

func benchOutbox(b *testing.B, clients int) {
	srv := redistest.StartPrivate(b)
	client, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	streams, err := streamfx.New(client, streamfx.Config{})
	if err != nil {
		b.Fatal(err)
	}
	prefix := redistest.Prefix(b)
	s, err := New(client, Config{KeyPrefix: prefix, DefaultTTL: time.Minute}, WithStreams(streams))
	if err != nil {
		b.Fatal(err)
	}
	_ = s.Start(context.Background())
	b.Cleanup(func() { _ = s.Close(); _ = client.Close() })
	stream := prefix + "payment.created"
	event := []byte(`{"id":"pay_123","amount":1250,"currency":"EUR","status":"succeeded"}`)
	plain := s.Install(Idempotent()(http.HandlerFunc(paymentHandler)))
	emitting := s.Install(Idempotent()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := Emit(r.Context(), stream, event); err != nil {
			b.Error(err)
		}
		paymentHandler(w, r)
	})))
	// The same with its relay stopped: the events are committed with the
	// outcome and left in the outbox, to split the cost between the
	// commit and the delivery.
	committing, err := New(client, Config{KeyPrefix: prefix + "c:", DefaultTTL: time.Minute}, WithStreams(streams))
	if err != nil {
		b.Fatal(err)
	}
	_ = committing.Start(context.Background())
	committing.outbox.shutdown(context.Background())
	b.Cleanup(func() { _ = committing.Close() })
	commitOnly := committing.Install(Idempotent()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := Emit(r.Context(), stream+".undelivered", event); err != nil {
			b.Error(err)
		}
		paymentHandler(w, r)
	})))
	// The announcement as the payments example made it before the outbox:
	// a Publish on the request path, lost or doubled by a crash.
	publishing := s.Install(Idempotent()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := streams.Publish(r.Context(), stream+".published", event); err != nil {
			b.Error(err)
		}
		paymentHandler(w, r)
	})))
	admin := srv.Client() // reads INFO and XLEN; its own CPU is outside Redis's commands' share

	var key atomic.Int64
	var emitted int64
	// block serves outboxBenchBlock requests through h from clients
	// goroutines, waits until the relay has delivered every event emitted
	// so far, and returns the CPU time it took here and in Redis.
	// Its goroutines carry the profiler label kind=name.
	block := func(name string, h http.Handler, events int64) (self, server time.Duration) {
		self0, server0 := processCPU(b), redisCPU(b, admin)
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go pprof.Do(context.Background(), pprof.Labels("kind", name), func(context.Context) {
				defer wg.Done()
				for range outboxBenchBlock / clients {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, benchRequest("k"+strconv.FormatInt(key.Add(1), 10)))
					if w.Code != http.StatusCreated {
						b.Errorf("status %d: %s", w.Code, w.Body)
					}
				}
			})
		}
		wg.Wait()
		emitted += events
		for admin.XLen(context.Background(), stream).Val() < emitted { // also once when there is nothing to wait for
			time.Sleep(100 * time.Microsecond)
		}
		return processCPU(b) - self0, redisCPU(b, admin) - server0
	}
	block("warm-up", emitting, outboxBenchBlock) // warm up: scripts loaded, the stream made
	var selfPlain, selfEvent, selfCommit, selfPublish, serverPlain, serverEvent, serverCommit, serverPublish time.Duration
	blocks := 0
	for b.Loop() {
		self, server := block("plain", plain, 0)
		selfPlain, serverPlain = selfPlain+self, serverPlain+server
		self, server = block("event", emitting, outboxBenchBlock)
		selfEvent, serverEvent = selfEvent+self, serverEvent+server
		self, server = block("commit-only", commitOnly, 0)
		selfCommit, serverCommit = selfCommit+self, serverCommit+server
		self, server = block("publish", publishing, 0)
		selfPublish, serverPublish = selfPublish+self, serverPublish+server
		blocks++
	}
	if n := admin.XLen(context.Background(), stream).Val(); n != emitted {
		b.Fatalf("%d events delivered, %d emitted", n, emitted)
	}
	if os.Getenv("OUTBOX_BENCH_STATS") != "" {
		b.Logf("emitted %d, requests %d\n%s", emitted, key.Load(), admin.Info(context.Background(), "commandstats").Val())
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(blocks*outboxBenchBlock) }
	b.ReportMetric(per(selfPlain), "cpu-ns/req")
	b.ReportMetric(per(selfEvent), "event-cpu-ns/req")
	b.ReportMetric(float64(selfEvent)/float64(selfPlain), "cpu-ratio")
	b.ReportMetric(per(serverPlain), "redis-cpu-ns/req")
	b.ReportMetric(per(serverEvent), "event-redis-cpu-ns/req")
	b.ReportMetric(float64(serverEvent)/float64(serverPlain), "redis-cpu-ratio")
	b.ReportMetric(float64(selfCommit)/float64(selfPlain), "commit-only-cpu-ratio")
	b.ReportMetric(float64(serverCommit)/float64(serverPlain), "commit-only-redis-cpu-ratio")
	b.ReportMetric(float64(selfPublish)/float64(selfPlain), "publish-cpu-ratio")
	b.ReportMetric(float64(serverPublish)/float64(serverPlain), "publish-redis-cpu-ratio")
}

// outboxBenchBlock is the requests of one kind served between two
// readings (a multiple of the clients).
const outboxBenchBlock = 320

// processCPU is this process's CPU time, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the redis-server's CPU time, user and system, as INFO cpu
// gives it (to the microsecond).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\r\n") {
		name, v, _ := strings.Cut(line, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			secs, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += time.Duration(secs * float64(time.Second))
		}
	}
	return total
}
