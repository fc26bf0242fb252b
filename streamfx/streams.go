// Package streamfx is Redis Streams with consumer groups as an Fx module:
// publish, consume with one handler per stream, acknowledge on success,
// retry failed or abandoned messages (pending entries claimed again after
// an idle time), and after the maximum number of attempts move a message to
// the dead-letter stream "<stream>:dlq" with its reason. Consumers start and
// stop with the application; on stop they finish the messages in hand, in
// bounded time. The trace context travels inside each message, so a
// consumer's span joins the producer's trace. Spans: stream.publish,
// stream.consume, stream.ack, stream.move_to_dlq; metrics: stream_length,
// stream_consumer_lag, stream_messages_total.
package streamfx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/scripts"
)

// Message is one stream entry as a handler sees it.
type Message struct {
	// ID is the entry's stream id ("1700000000000-0").
	ID string
	// Stream is the stream it was read from.
	Stream string
	// Data is the published payload.
	Data []byte
	// Attempt is this delivery's number: 1 the first time, up to
	// Config.MaxAttempts.
	Attempt int
}

// Handler processes one message. Returning nil acknowledges it; an error
// (or a panic) leaves it for a retry after Config.ClaimIdle, or moves it
// to the dead-letter stream when it was the last attempt. ctx is cancelled
// only when a stop's StopTimeout runs out.
type Handler func(ctx context.Context, m Message) error

// Message fields in Redis. The payload is "data"; the trace context rides
// beside it under the W3C names.
const (
	FieldData = "data"
	// Dead-letter entries add these to the original's fields.
	FieldReason         = "dlq_reason"
	FieldOriginalID     = "dlq_original_id"
	FieldOriginalStream = "dlq_original_stream"
	FieldAttempts       = "dlq_attempts"
	FieldError          = "dlq_error"
)

// ReasonMaxRetriesExceeded is the dead-letter reason of a message whose
// every attempt failed.
const ReasonMaxRetriesExceeded = "MaxRetriesExceeded"

// DLQSuffix names a stream's dead-letter stream: "<stream>:dlq".
const DLQSuffix = ":dlq"

// Streams publishes to streams and runs the registered handlers.
type Streams struct {
	cfg        Config
	rdb        redis.UniversalClient
	obs        *observer
	log        *zap.Logger
	propagator propagation.TextMapPropagator

	renewed sync.Map // stream → *atomic.Int64: unix nanos of the last Retention renewal

	mu        sync.Mutex
	consumers []*consumer
	running   bool
	stop      context.CancelFunc // ends the read loops
	abort     context.CancelFunc // cancels handlers' contexts (StopTimeout ran out)
	wg        sync.WaitGroup
}

// New builds Streams without Fx. Register handlers with Handle, then Start;
// Stop at the end.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Streams, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	o := options{log: zap.NewNop()}
	for _, f := range opts {
		f(&o)
	}
	s := &Streams{cfg: cfg, rdb: rdb, log: o.log,
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	if s.obs, err = newObserver(o.registerer, o.tracer, s); err != nil {
		return nil, err
	}
	return s, nil
}

// Config is the effective configuration, defaults filled in.
func (s *Streams) Config() Config { return s.cfg }

// Handle registers h for stream; it must be called before Start. One
// handler per stream.
func (s *Streams) Handle(stream string, h Handler) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return fmt.Errorf("streamfx: Handle(%q) after Start", stream)
	}
	if stream == "" || h == nil {
		return errors.New("streamfx: Handle needs a stream name and a handler")
	}
	for _, c := range s.consumers {
		if c.stream == stream {
			return fmt.Errorf("streamfx: stream %q already has a handler", stream)
		}
	}
	s.consumers = append(s.consumers, &consumer{s: s, stream: stream, handler: h})
	s.obs.track(stream)
	return nil
}

// Publish appends data to stream and returns the entry's id. The trace
// context of ctx (the stream.publish span) is stored with it.
func (s *Streams) Publish(ctx context.Context, stream string, data []byte) (string, error) {
	ctx, span := s.obs.startPublish(ctx, stream, len(data))
	values := []any{FieldData, data}
	carrier := propagation.MapCarrier{}
	s.propagator.Inject(ctx, carrier)
	for k, v := range carrier {
		values = append(values, k, v)
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	id, err := s.append(sctx, stream, values)
	if err != nil {
		err = fmt.Errorf("streamfx: publish to %q: %w", stream, err)
	}
	s.obs.endPublish(span, id, err)
	return id, err
}

// append adds an entry (XADD, trimmed to MaxLen) and, at most once a
// second per stream and process, renews the stream's Retention in the same
// round trip: a stream then expires between Retention-1s and Retention
// after its last publish, without an extra command on every publish.
func (s *Streams) append(ctx context.Context, stream string, values []any) (string, error) {
	args := &redis.XAddArgs{Stream: stream, MaxLen: s.cfg.MaxLen, Approx: s.cfg.MaxLen > 0, Values: values}
	if s.cfg.Retention == 0 || !s.renewDue(stream) {
		return s.rdb.XAdd(ctx, args).Result()
	}
	var add *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		add = p.XAdd(ctx, args)
		p.PExpire(ctx, stream, s.cfg.Retention)
		return nil
	})
	if err != nil {
		s.renewed.Delete(stream) // renew with the next publish
		return "", err
	}
	return add.Val(), nil
}

// renewDue reports whether stream's expiry was last renewed by this process
// more than a second ago (or never), and claims the renewal.
func (s *Streams) renewDue(stream string) bool {
	now := time.Now().UnixNano()
	v, _ := s.renewed.LoadOrStore(stream, new(atomic.Int64))
	last := v.(*atomic.Int64)
	prev := last.Load()
	return now-prev >= int64(time.Second) && last.CompareAndSwap(prev, now)
}

// PublishJSON publishes v encoded as JSON.
func PublishJSON[T any](ctx context.Context, s *Streams, stream string, v T) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return s.Publish(ctx, stream, b)
}

// Start creates the consumer groups that are missing and starts one read
// loop per handled stream.
func (s *Streams) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	for _, c := range s.consumers {
		if err := c.ensureGroup(ctx); err != nil {
			return err
		}
	}
	if len(s.consumers) > 0 {
		_ = scripts.Preload(ctx, s.rdb, touchScript) // not fatal: loads on first use
	}
	loopCtx, stop := context.WithCancel(context.Background())
	handlerCtx, abort := context.WithCancel(context.Background())
	s.stop, s.abort, s.running = stop, abort, true
	for _, c := range s.consumers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.run(loopCtx, handlerCtx)
		}()
	}
	return nil
}

// Stop ends the read loops and waits for the messages in hand, at most
// StopTimeout (or until ctx ends); then their handlers' contexts are
// cancelled and Stop returns an error naming the timeout. Messages not
// finished stay pending and are claimed again later.
func (s *Streams) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return nil
	}
	s.running = false
	stop, abort := s.stop, s.abort
	s.mu.Unlock()
	stop()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	timer := time.NewTimer(s.cfg.StopTimeout)
	defer timer.Stop()
	select {
	case <-done:
		abort()
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
		defer cancel()
		for _, c := range s.consumers {
			c.leave(lctx)
		}
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	abort() // ask the handlers still running to give up
	select {
	case <-done:
		return fmt.Errorf("streamfx: stop: handlers still running after StopTimeout %v were cancelled", s.cfg.StopTimeout)
	case <-ctx.Done():
		return fmt.Errorf("streamfx: stop: handlers did not return: %w", ctx.Err())
	}
}
