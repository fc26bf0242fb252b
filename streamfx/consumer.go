package streamfx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/tracingfx"
)

// consumer runs one stream's handler in this process.
type consumer struct {
	s       *Streams
	stream  string
	handler Handler
}

func (c *consumer) ensureGroup(ctx context.Context) error {
	err := c.s.rdb.XGroupCreateMkStream(ctx, c.stream, c.s.cfg.Group, c.s.cfg.StartID).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("streamfx: create group %q on %q: %w", c.s.cfg.Group, c.stream, err)
	}
	if err == nil && c.s.cfg.Retention > 0 { // MKSTREAM may have made the stream: it expires too
		_ = c.s.rdb.PExpire(ctx, c.stream, c.s.cfg.Retention).Err()
	}
	return nil
}

// run reads until loopCtx ends: abandoned and failed messages first (every
// ClaimIdle/2), then new ones. Reads are not cancelled mid-way (a reply cut
// off would leave its messages pending until the next claim); Block bounds
// how long stopping waits for one.
func (c *consumer) run(loopCtx, handlerCtx context.Context) {
	cfg := c.s.cfg
	var lastClaim time.Time
	backoff := 50 * time.Millisecond
	for loopCtx.Err() == nil {
		if time.Since(lastClaim) >= cfg.ClaimIdle/2 {
			lastClaim = time.Now()
			// A full batch means more may wait: drain a few batches, then
			// read new messages too.
			for range 10 {
				if c.reclaim(handlerCtx) < cfg.BatchSize || loopCtx.Err() != nil {
					break
				}
			}
		}
		rctx, cancel := context.WithTimeout(context.Background(), cfg.Block+cfg.StoreTimeout)
		res, err := c.s.rdb.XReadGroup(rctx, &redis.XReadGroupArgs{
			Group: cfg.Group, Consumer: cfg.Consumer, Streams: []string{c.stream, ">"}, Count: int64(cfg.BatchSize), Block: cfg.Block,
		}).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			if strings.HasPrefix(err.Error(), "NOGROUP") { // the stream or group was deleted (or Redis restarted empty)
				gctx, cancel := context.WithTimeout(context.Background(), cfg.StoreTimeout)
				if c.ensureGroup(gctx) == nil {
					cancel()
					continue // at once: nothing to wait for
				}
				cancel()
			}
			c.s.log.Warn("stream read failed", zap.String("stream", c.stream), zap.Error(err))
			sleep(loopCtx, backoff)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for _, st := range res {
			c.handleBatch(handlerCtx, st.Messages, nil)
		}
	}
}

// handleBatch handles msgs with up to Concurrency at once; attempts gives
// each message's delivery number (nil: first deliveries). The messages
// handled successfully are acknowledged together, in one XACK: one round
// trip per batch instead of one per message. Until then their consumer
// keeps them touched, so none looks abandoned while a slower one of the
// batch runs.
func (c *consumer) handleBatch(ctx context.Context, msgs []redis.XMessage, attempts map[string]int) {
	sem := make(chan struct{}, c.s.cfg.Concurrency)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		succeeded []handled
	)
	for _, m := range msgs {
		attempt := 1
		if a, ok := attempts[m.ID]; ok {
			attempt = a
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if h, ok := c.process(ctx, m, attempt); ok {
				mu.Lock()
				succeeded = append(succeeded, h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.ack(succeeded)
}

// handled is a message whose handler succeeded, waiting for its ack: its
// consume span is still open and it is still being touched.
type handled struct {
	id    string
	ctx   context.Context
	span  *tracingfx.PluginSpan
	lease *touch
}

// process runs the handler on one delivery. On success it returns the
// message for the batch's ack; on failure it settles the message itself:
// dead-letter after the last attempt, else leave it pending for a retry
// after ClaimIdle.
func (c *consumer) process(ctx context.Context, m redis.XMessage, attempt int) (handled, bool) {
	carrier := propagation.MapCarrier{}
	var data []byte
	for k, v := range m.Values {
		s, _ := v.(string)
		if k == FieldData {
			data = []byte(s)
		} else {
			carrier[k] = s
		}
	}
	ctx = c.s.propagator.Extract(ctx, carrier) // the producer's trace
	ctx, span := c.s.obs.startConsume(ctx, c.stream, c.s.cfg.Group, c.s.cfg.Consumer, m.ID, attempt)
	lease := c.keepTouched(m.ID)
	err := c.call(ctx, Message{ID: m.ID, Stream: c.stream, Data: data, Attempt: attempt})
	if err == nil {
		c.s.obs.processed(span, c.stream)
		return handled{id: m.ID, ctx: ctx, span: span, lease: lease}, true
	}
	lease.Stop()
	c.s.obs.failed(span, c.stream, attempt, err)
	if attempt >= c.s.cfg.MaxAttempts {
		c.deadLetter(ctx, m, attempt, err.Error())
	}
	c.s.obs.endConsume(span, err)
	return handled{}, false
}

// ack acknowledges the handled messages in one XACK; each keeps its own
// stream.ack span.
func (c *consumer) ack(done []handled) {
	if len(done) == 0 {
		return
	}
	ids := make([]string, len(done))
	spans := make([]*tracingfx.PluginSpan, len(done))
	for i, h := range done {
		ids[i] = h.id
		_, spans[i] = c.s.obs.startAck(h.ctx, c.stream)
	}
	sctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.StoreTimeout)
	err := c.s.rdb.XAck(sctx, c.stream, c.s.cfg.Group, ids...).Err()
	cancel()
	if err != nil {
		// Not lost: the messages stay pending and are handled again after
		// ClaimIdle (handlers must tolerate redelivery, as with any stream).
		err = fmt.Errorf("streamfx: ack %d messages on %q: %w", len(ids), c.stream, err)
		c.s.log.Warn("stream ack failed", zap.Error(err))
	}
	for i, h := range done {
		h.lease.Stop()
		c.s.obs.endAck(spans[i], err)
		c.s.obs.endConsume(h.span, nil)
	}
}

func (c *consumer) call(ctx context.Context, m Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("streamfx: handler for %q panicked: %v", c.stream, p)
			c.s.log.Error("stream handler panicked", zap.String("stream", c.stream), zap.String("message_id", m.ID), zap.Any("panic", p))
		}
	}()
	return c.handler(ctx, m)
}

// deadLetter copies the message to "<stream>:dlq" with the reason and then
// acknowledges it. The two are separate commands (the streams may live on
// different Cluster slots): a crash between them leaves the message
// pending, so it is dead-lettered again — a DLQ entry may repeat, none is
// lost.
func (c *consumer) deadLetter(ctx context.Context, m redis.XMessage, attempts int, lastErr string) {
	dlq := c.stream + DLQSuffix
	ctx, span := c.s.obs.startDLQ(ctx, c.stream, dlq, ReasonMaxRetriesExceeded, m.ID)
	values := make([]any, 0, 2*len(m.Values)+10)
	for k, v := range m.Values {
		values = append(values, k, v)
	}
	if len(lastErr) > 1024 {
		lastErr = lastErr[:1024]
	}
	values = append(values, FieldReason, ReasonMaxRetriesExceeded, FieldOriginalID, m.ID, FieldOriginalStream, c.stream,
		FieldAttempts, strconv.Itoa(attempts), FieldError, lastErr)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.s.cfg.StoreTimeout)
	defer cancel()
	_, err := c.s.append(sctx, dlq, values)
	if err == nil {
		err = c.s.rdb.XAck(sctx, c.stream, c.s.cfg.Group, m.ID).Err()
	}
	if err != nil {
		err = fmt.Errorf("streamfx: move %s to %q: %w", m.ID, dlq, err)
		c.s.log.Warn("stream dead-letter failed", zap.Error(err))
	}
	c.s.obs.endDLQ(span, c.stream, err)
}

// reclaim takes over messages of the group that have been pending longer
// than ClaimIdle (their handler failed, or their consumer died): those
// delivered MaxAttempts times already go to the dead-letter stream, the
// others are handled again.
func (c *consumer) reclaim(ctx context.Context) (claimed int) {
	cfg := c.s.cfg
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.StoreTimeout)
	defer cancel()
	pending, err := c.s.rdb.XPendingExt(sctx, &redis.XPendingExtArgs{
		Stream: c.stream, Group: cfg.Group, Idle: cfg.ClaimIdle, Start: "-", End: "+", Count: int64(cfg.BatchSize),
	}).Result()
	if err != nil || len(pending) == 0 {
		return 0
	}
	ids := make([]string, len(pending))
	attempts := make(map[string]int, len(pending))
	for i, p := range pending {
		ids[i] = p.ID
		attempts[p.ID] = int(p.RetryCount) + 1 // this claim is one more delivery
	}
	// XCLAIM re-checks the idle time: of two consumers claiming at once,
	// only one gets each message.
	msgs, err := c.s.rdb.XClaim(sctx, &redis.XClaimArgs{
		Stream: c.stream, Group: cfg.Group, Consumer: cfg.Consumer, MinIdle: cfg.ClaimIdle, Messages: ids,
	}).Result()
	if err != nil {
		return 0
	}
	var retry []redis.XMessage
	for _, m := range msgs {
		if attempts[m.ID] > cfg.MaxAttempts { // its last attempt's consumer died before settling it
			c.deadLetter(ctx, m, attempts[m.ID]-1, "delivered "+strconv.Itoa(cfg.MaxAttempts)+" times without being acknowledged")
			continue
		}
		retry = append(retry, m)
	}
	c.handleBatch(ctx, retry, attempts)
	return len(msgs)
}

// leave removes this consumer from the group if it holds no pending
// message, so that the group's consumer list does not grow with every
// process start. A consumer that still holds messages stays: deleting it
// would drop them from the pending list, and they would never be retried.
func (c *consumer) leave(ctx context.Context) {
	cfg := c.s.cfg
	mine, err := c.s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.stream, Group: cfg.Group, Start: "-", End: "+", Count: 1, Consumer: cfg.Consumer}).Result()
	if err != nil || len(mine) > 0 {
		return
	}
	_ = c.s.rdb.XGroupDelConsumer(ctx, c.stream, cfg.Group, cfg.Consumer).Err()
}

// touchScript resets a pending message's idle time if this consumer still
// owns it (XCLAIM … JUSTID does not count a delivery).
var touchScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if p[1] and p[1][2] == ARGV[2] then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
  return 1
end
return 0
`)

// keepTouched keeps a message in hand from looking abandoned: every
// ClaimIdle/3 it resets its idle time, until stopped.
func (c *consumer) keepTouched(id string) *touch {
	every := c.s.cfg.ClaimIdle / 3
	l := &touch{}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(every, func() {
		sctx, cancel := context.WithTimeout(context.Background(), every)
		_ = touchScript.Run(sctx, c.s.rdb, []string{c.stream}, c.s.cfg.Group, c.s.cfg.Consumer, id).Err()
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		if !l.stopped {
			l.timer.Reset(every)
		}
	})
	return l
}

// touch is the renewal of one message in hand.
type touch struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// Stop ends the renewal (a renewal already running completes).
func (l *touch) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.timer.Stop()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
