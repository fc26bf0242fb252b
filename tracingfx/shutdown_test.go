package tracingfx

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// collector is a fake OTLP backend on loopback that never answers: silent
// reads and keeps every connection open, closing accepts and closes each
// connection at once. It counts connections and bytes.
type collector struct {
	ln      net.Listener
	closing bool
	accepts atomic.Int64
	bytes   atomic.Int64
	open    atomic.Int64
	// after is set when Shutdown returned; late counts the bytes of the
	// connections accepted after that.
	after atomic.Bool
	late  atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newCollector(t *testing.T, closing bool) *collector {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{ln: ln, closing: closing}
	c.wg.Add(1)
	go c.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		c.mu.Lock()
		for _, conn := range c.conns {
			_ = conn.Close()
		}
		c.mu.Unlock()
		c.wg.Wait()
	})
	return c
}

func (c *collector) url() string { return "http://" + c.ln.Addr().String() }

func (c *collector) accept() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.accepts.Add(1)
		if c.closing {
			_ = conn.Close()
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
		c.open.Add(1)
		c.wg.Add(1)
		late := c.after.Load()
		go func() {
			defer c.wg.Done()
			defer c.open.Add(-1)
			buf := make([]byte, 32<<10)
			for {
				n, err := conn.Read(buf)
				c.bytes.Add(int64(n))
				if late {
					c.late.Add(int64(n))
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (c *collector) counts() string {
	return fmt.Sprintf("%d connections, %d bytes", c.accepts.Load(), c.bytes.Load())
}

// No byte and no connection reaches the backend once Shutdown returned,
// for spans and bridged logs, over HTTP and gRPC, whether the backend hangs
// or refuses, and no connection stays open.
func TestShutdown_NothingReachesTheBackendAfterItReturned(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		for _, closing := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/closing=%v", protocol, closing), func(t *testing.T) {
				t.Parallel()
				c := newCollector(t, closing)
				p, err := NewProvider(context.Background(), Config{
					Exporter:        ExporterConfig{Type: ExporterOTLP, Protocol: protocol, Endpoint: c.url() + "/v1/traces"},
					Batch:           BatchConfig{MaxExportBatchSize: 32, ScheduleDelay: time.Millisecond},
					ShutdownTimeout: 300 * time.Millisecond,
				})
				if err != nil {
					t.Fatal(err)
				}
				log := BridgeLogger(zap.NewNop(), p)
				tr := p.TracerProvider().Tracer("test")
				for i := range 2000 {
					_, s := tr.Start(context.Background(), "work")
					s.End()
					if i%4 == 0 {
						log.Info("work")
					}
				}
				for deadline := time.Now().Add(5 * time.Second); c.accepts.Load() == 0; {
					if time.Now().After(deadline) {
						t.Fatal("no export reached the collector")
					}
					time.Sleep(time.Millisecond)
				}
				_ = p.Shutdown(context.Background())
				c.after.Store(true)
				// Every connection is closed by then: the collector reads what
				// was sent before, then EOF.
				for deadline := time.Now().Add(2 * time.Second); c.open.Load() > 0 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				if n := c.open.Load(); n > 0 {
					t.Errorf("%d connections still open after Shutdown returned", n)
				}
				// A connection accepted after Shutdown returned may have been
				// made before (the accept queue) but carries nothing.
				time.Sleep(500 * time.Millisecond)
				if n := c.late.Load(); n > 0 {
					t.Errorf("%d bytes arrived on connections accepted after Shutdown returned", n)
				}
				// Nothing more arrives once what was sent before has landed.
				before := c.counts()
				for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond)
					now := c.counts()
					if now == before {
						break
					}
					before = now
				}
				time.Sleep(500 * time.Millisecond)
				if after := c.counts(); after != before {
					t.Errorf("after Shutdown returned the backend got more: %s, then %s", before, after)
				}
			})
		}
	}
}

// OTEL_EXPORTER_OTLP_TRACES_TIMEOUT still bounds each request over HTTP,
// on the client tracingfx gives the exporter: against a collector that
// never answers, the request is given up and its connection closed.
func TestShutdown_ExporterTimeoutBoundsEachRequest(t *testing.T) {
	c := newCollector(t, false)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "100")
	p, err := NewProvider(context.Background(), Config{Exporter: ExporterConfig{Type: ExporterOTLP, Endpoint: c.url()},
		Batch: BatchConfig{ScheduleDelay: time.Millisecond}, ShutdownTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	_, s := p.TracerProvider().Tracer("test").Start(context.Background(), "work")
	s.End()
	for deadline := time.Now().Add(5 * time.Second); c.accepts.Load() == 0 || c.open.Load() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%s, %d open: the request that never got an answer was not ended by the exporter's timeout", c.counts(), c.open.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
