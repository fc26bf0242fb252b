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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/durations"
	"github.com/redisfx/redisfx/internal/plugin"
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
	// EventID is the stable id of an event an idempotencyfx outbox
	// delivered (FieldEventID), "" for a Publish: a consumer that must not
	// act twice deduplicates on it.
	EventID string
}

// Handler processes one message. Returning nil acknowledges it; an error
// (a panic, runtime.Goexit) leaves it for a retry after Config.ClaimIdle,
// or dead-letters it after the last attempt. ctx is cancelled only when a
// stop gives up waiting; a failure after that costs no attempt.
type Handler func(ctx context.Context, m Message) error

// Message fields in Redis. The payload is "data"; the trace context rides
// beside it under the W3C names.
const (
	FieldData = "data"
	// FieldEventID carries the id of an event delivered by an idempotencyfx
	// outbox: "<record key>/<fencing token>/<index>".
	FieldEventID = "event_id"
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
	halt      context.CancelFunc // stops touching the messages of abandoned handlers
	wg        sync.WaitGroup
	handlers  atomic.Int64 // handlers running now
}

// New builds Streams without Fx. Register handlers with Handle, then Start;
// Stop at the end.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Streams, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if err := clientcheck.HonoursDeadlines("streamfx", "Config.StoreTimeout", rdb); err != nil {
		return nil, err
	}
	o := plugin.Apply("streams", plugin.Options{}, opts...)
	s := &Streams{cfg: cfg, rdb: rdb, log: o.Log,
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	if s.obs, err = newObserver(o.Registerer, o.Tracer, s); err != nil {
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
	if span := s.cfg.retrySpan(); s.cfg.Retention > 0 && s.cfg.Retention < span {
		// A message that keeps failing must reach its dead-letter entry
		// before the stream expires with it.
		return configError("Retention", fmt.Sprintf("%v is below 2×MaxAttempts×ClaimIdle (%v): a message that keeps failing could expire with its stream before its last attempt and its dead-letter entry", s.cfg.Retention, span))
	}
	for _, c := range s.consumers {
		if c.stream == stream {
			return fmt.Errorf("streamfx: stream %q already has a handler", stream)
		}
	}
	s.consumers = append(s.consumers, &consumer{s: s, stream: stream, handler: h})
	_ = s.obs.track(stream) // read from Start on
	return nil
}

// Publish appends data to stream and returns the entry's id. The trace
// context of ctx (the stream.publish span) is stored with it.
func (s *Streams) Publish(ctx context.Context, stream string, data []byte) (string, error) {
	ctx, span := s.obs.start(ctx, trace.SpanKindProducer, "stream.publish", "XADD", attribute.String(AttrStream, stream), attribute.Int(AttrMessageSize, len(data)))
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
	} else {
		span.SetAttributes(attribute.String(AttrMessageID, id))
		span.AddEvent("message.published")
	}
	span.Finish(err)
	// Known once the entry is there: the first reading counts it. Its
	// backlog series appear with the reading this asks for.
	if s.obs.track(stream) {
		s.obs.readSoon()
	}
	return id, err
}

// append adds an entry (XADD, trimmed to MaxLen). With a Retention, the
// same round trip renews the stream's expiry at most once per renewal
// interval per stream and process; every other publish sends PEXPIRE … NX,
// so an XADD that made an expired stream again never leaves it without one.
func (s *Streams) append(ctx context.Context, stream string, values []any) (string, error) {
	args := &redis.XAddArgs{Stream: stream, MaxLen: s.cfg.MaxLen, Approx: s.cfg.MaxLen > 0, Values: values}
	if s.cfg.Retention == 0 {
		return s.rdb.XAdd(ctx, args).Result()
	}
	renew := s.renewDue(stream)
	var add *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		add = p.XAdd(ctx, args)
		if renew {
			p.PExpire(ctx, stream, s.cfg.Retention)
		} else {
			p.Do(ctx, "PEXPIRE", stream, s.cfg.Retention.Milliseconds(), "NX")
		}
		return nil
	})
	if err != nil {
		s.renewed.Delete(stream) // renew with the next publish
		return "", err
	}
	return add.Val(), nil
}

// renewInterval is the least time between two renewals of a stream's expiry.
func (c Config) renewInterval() time.Duration { return min(time.Second, c.Retention/2) }

// retrySpan is the least Retention a consumer accepts, 2×MaxAttempts×ClaimIdle
// (saturated): a failing message runs MaxAttempts times, ClaimIdle apart.
func (c Config) retrySpan() time.Duration {
	return durations.Mul(durations.Mul(c.ClaimIdle, 2), int64(c.MaxAttempts))
}

// renewDue reports whether stream's expiry was last renewed by this process
// a renewal interval ago or more (or never), and claims the renewal.
func (s *Streams) renewDue(stream string) bool {
	now := time.Now().UnixNano()
	v, _ := s.renewed.LoadOrStore(stream, new(atomic.Int64))
	last, _ := v.(*atomic.Int64) // the only type stored
	prev := last.Load()
	return now-prev >= int64(s.cfg.renewInterval()) && last.CompareAndSwap(prev, now)
}

// PublishJSON publishes v encoded as JSON.
func PublishJSON[T any](ctx context.Context, s *Streams, stream string, v T) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return s.Publish(ctx, stream, b)
}

// Start creates the missing consumer groups and starts one read loop per
// handled stream (and, with a registerer, the backlog reading).
func (s *Streams) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	for _, c := range s.consumers {
		if err := c.ensureGroup(ctx, s.cfg.StartID); err != nil {
			return err
		}
	}
	if len(s.consumers) > 0 {
		_ = scripts.Preload(ctx, s.rdb, touchScript, giveBackScript, forgetScript) // not fatal: loads on first use
	}
	loopCtx, stop := context.WithCancel(context.Background())
	handlerCtx, abort := context.WithCancel(context.Background())
	haltCtx, halt := context.WithCancel(context.Background())
	s.stop, s.abort, s.halt, s.running = stop, abort, halt, true
	for _, c := range s.consumers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.run(loopCtx, handlerCtx, haltCtx)
		}()
	}
	if s.obs.backlog != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.obs.backlog.refresh(loopCtx)
		}()
	}
	return nil
}

// Stop ends the read loops, gives back the messages not started, and lets
// the running handlers finish for StopTimeout (or until ctx ends); then it
// cancels them and waits StoreTimeout more before abandoning them. It
// returns within StopTimeout + 2×StoreTimeout (see docs/streams.md).
func (s *Streams) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return nil
	}
	s.running = false
	stop, abort, halt := s.stop, s.abort, s.halt
	s.mu.Unlock()
	stop()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	leave := func() {
		halt()
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
		defer cancel()
		for _, c := range s.consumers {
			c.leave(lctx)
		}
	}
	select {
	case <-done:
		abort()
		leave()
		return nil
	case <-time.After(s.cfg.StopTimeout):
	case <-ctx.Done():
	}
	running := s.handlers.Load()
	abort() // ask the handlers still running to give up
	select {
	case <-done:
		leave()
		if running == 0 { // only a Redis call outlasted StopTimeout, and it returned
			return nil
		}
		return fmt.Errorf("streamfx: stop: %d handlers still running after StopTimeout %v were cancelled", running, s.cfg.StopTimeout)
	case <-time.After(s.cfg.StoreTimeout):
		halt()
		return s.abandoned(fmt.Sprintf("%v after StopTimeout %v", s.cfg.StoreTimeout, s.cfg.StopTimeout))
	case <-ctx.Done():
		halt()
		return s.abandoned(ctx.Err().Error())
	}
}

// abandoned describes what a stop gave up on: the handlers still running,
// or else a Redis call of the consumers that has not returned. The
// consumers stay in the group: a call on its way could still deliver.
func (s *Streams) abandoned(when string) error {
	if n := s.handlers.Load(); n > 0 {
		return fmt.Errorf("streamfx: stop: %d handlers still running (%s) were abandoned; their messages stay pending", n, when)
	}
	return fmt.Errorf("streamfx: stop: no handler was running, but a Redis call of the consumers had not returned (%s): abandoned; the consumers stay in the group", when)
}
