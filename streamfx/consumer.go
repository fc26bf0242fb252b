package streamfx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/backoff"
	"github.com/redisfx/redisfx/internal/durations"
	"github.com/redisfx/redisfx/internal/safetext"
	"github.com/redisfx/redisfx/plugintrace"
)

// consumer runs one stream's handler in this process.
type consumer struct {
	s       *Streams
	stream  string
	handler Handler
}

// ensureGroup creates the group if it is missing, reading from start:
// StartID when the app starts, "0" when the group was lost while running.
func (c *consumer) ensureGroup(ctx context.Context, start string) error {
	ctx = plugintrace.WithoutCommandSpans(ctx)
	err := c.s.rdb.XGroupCreateMkStream(ctx, c.stream, c.s.cfg.Group, start).Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("streamfx: create group %q on %q: %w", c.s.cfg.Group, c.stream, err)
	}
	if err == nil && c.s.cfg.Retention > 0 {
		// MKSTREAM may have made the stream: it expires too. NX: a stream
		// that was there keeps the expiry its last publish gave it.
		_ = c.s.rdb.Do(ctx, "PEXPIRE", c.stream, c.s.cfg.Retention.Milliseconds(), "NX").Err()
	}
	return nil
}

// storeCtx bounds one background call by StoreTimeout. Background calls
// make no command span, so an idle consumer starts no trace.
func (c *consumer) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(plugintrace.WithoutCommandSpans(context.Background()), c.s.cfg.StoreTimeout)
}

// run reads until loopCtx ends: failed and abandoned messages first (every
// ClaimIdle/2), then new ones. A read is never cancelled mid-way (its
// messages would stay pending); Block bounds it.
func (c *consumer) run(loopCtx, handlerCtx, haltCtx context.Context) {
	cfg := c.s.cfg
	var lastClaim, lastForget time.Time
	pause := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for loopCtx.Err() == nil {
		if time.Since(lastClaim) >= cfg.ClaimIdle/2 {
			lastClaim = time.Now()
			c.forgetDeadConsumers(&lastForget)
			for range 10 { // a full batch: more may wait
				if c.reclaim(loopCtx, handlerCtx, haltCtx) < cfg.BatchSize || loopCtx.Err() != nil {
					break
				}
			}
		}
		rctx, cancel := context.WithTimeout(plugintrace.WithoutCommandSpans(context.Background()), durations.Add(cfg.Block, cfg.StoreTimeout))
		fetched := time.Now()
		res, err := c.s.rdb.XReadGroup(rctx, &redis.XReadGroupArgs{
			Group: cfg.Group, Consumer: cfg.Consumer, Streams: []string{c.stream, ">"}, Count: int64(cfg.BatchSize), Block: cfg.Block,
		}).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
		case err == nil:
			pause.Reset()
			for _, st := range res {
				c.handleBatch(loopCtx, handlerCtx, haltCtx, st.Messages, nil, fetched)
			}
		case redis.HasErrorPrefix(err, "NOGROUP") && c.recreateGroup():
		default:
			c.s.log.Warn("stream read failed", zap.String("stream", c.stream), zap.Error(err))
			pause.Wait(loopCtx)
		}
	}
}

func (c *consumer) recreateGroup() bool {
	ctx, cancel := c.storeCtx()
	defer cancel()
	return c.ensureGroup(ctx, "0") == nil
}

// handleBatch handles msgs with up to Concurrency at once, each held and
// touched until settled; attempts gives each message's delivery number
// (absent: 1), fetched when the read or claim was sent.
func (c *consumer) handleBatch(loopCtx, handlerCtx, haltCtx context.Context, msgs []redis.XMessage, attempts map[string]int, fetched time.Time) {
	if len(msgs) == 0 {
		return
	}
	b := c.hold(msgs, fetched)
	stopTouching := b.keepTouched(haltCtx)
	sem := make(chan struct{}, c.s.cfg.Concurrency)
	acks := &acker{c: c, b: b}
	var wg sync.WaitGroup
	var notStarted []redis.XMessage
	for _, m := range msgs {
		if !c.turn(loopCtx, b, sem, m.ID) {
			if loopCtx.Err() != nil { // stopped: give it back (only if still ours)
				notStarted = append(notStarted, m)
			}
			continue
		}
		wg.Go(func() {
			h, out := c.process(handlerCtx, m, max(attempts[m.ID], 1))
			<-sem
			if out == outcomeDone {
				acks.add(h)
				return
			}
			b.drop(m.ID) // failed (retried after ClaimIdle, or dead-lettered) or stopped
			if out == outcomeStopped {
				c.giveBack([]redis.XMessage{m}, attempts)
			}
		})
	}
	c.giveBack(notStarted, attempts) // now, not after the running handlers: one may be abandoned
	wg.Wait()
	stopTouching()
}

// turn waits for a free slot for message id, or for the stop, and reports
// whether id runs: a message about to start must still be this consumer's.
func (c *consumer) turn(loopCtx context.Context, b *batch, sem chan struct{}, id string) bool {
	select { // a stop does not wait for a free slot
	case sem <- struct{}{}:
	case <-loopCtx.Done():
		b.drop(id)
		return false
	}
	if loopCtx.Err() == nil {
		owned, lost := b.own(id)
		if owned {
			return true
		}
		c.s.log.Warn("stream message not run: Redis did not confirm this consumer still owns it", zap.String("stream", c.stream),
			zap.String("message_id", id), zap.Bool("claimed_by_another", lost))
	}
	<-sem
	b.drop(id)
	return false
}

// acker acknowledges a batch's successes as they come, one XACK in flight
// at a time carrying every success queued meanwhile.
type acker struct {
	c     *consumer
	b     *batch
	send  sync.Mutex // held while an XACK is in flight
	mu    sync.Mutex
	queue []handled
}

// add queues h, then, once no XACK is in flight, sends every success
// queued (none if h went with an XACK sent meanwhile).
func (a *acker) add(h handled) {
	a.mu.Lock()
	a.queue = append(a.queue, h)
	a.mu.Unlock()
	a.send.Lock()
	defer a.send.Unlock()
	a.mu.Lock()
	q := a.queue
	a.queue = nil
	a.mu.Unlock()
	if len(q) > 0 {
		a.b.acked(q)
		a.c.ack(q)
		for _, h := range q {
			a.b.drop(h.id)
		}
	}
}

// handled is a success waiting for its ack, its consume span still open.
type handled struct {
	id   string
	ctx  context.Context
	span *plugintrace.Span
}

type outcome int

const (
	outcomeDone    outcome = iota // succeeded: acknowledge
	outcomeFailed                 // failed: retry after ClaimIdle, or dead-letter
	outcomeStopped                // cancelled by a stop: no attempt spent
)

// process runs the handler on one delivery and settles a failure: a
// dead-letter after the last attempt, else a pending retry. A run the stop
// cancelled is not counted: its message is given back.
func (c *consumer) process(ctx context.Context, m redis.XMessage, attempt int) (handled, outcome) {
	ctx, data, eventID := c.received(ctx, m)
	ctx, span := c.s.obs.startConsume(ctx, c.stream, c.s.cfg.Group, c.s.cfg.Consumer, m.ID, attempt)
	err := c.call(ctx, Message{ID: m.ID, Stream: c.stream, Data: data, Attempt: attempt, EventID: eventID})
	if err == nil {
		c.s.obs.count(c.stream, OutcomeProcessed)
		span.AddEvent("message.processed")
		return handled{id: m.ID, ctx: ctx, span: span}, outcomeDone
	}
	if ctx.Err() != nil {
		span.Finish(fmt.Errorf("streamfx: stopped before the handler finished: %w", err))
		return handled{}, outcomeStopped
	}
	c.s.obs.failed(span, c.stream, OutcomeFailed, attempt, err)
	if attempt >= c.s.cfg.MaxAttempts {
		c.deadLetter(ctx, m, attempt, err.Error())
	} else if c.s.cfg.Retention > 0 {
		// The retry must find its stream: a failure renews the expiry as a
		// publish does (GT: a stream without expiry keeps none).
		sctx, cancel := c.storeCtx()
		_ = c.s.rdb.Do(sctx, "PEXPIRE", c.stream, c.s.cfg.Retention.Milliseconds(), "GT").Err()
		cancel()
	}
	span.Finish(err)
	return handled{}, outcomeFailed
}

// received returns ctx in the producer's trace (carried in m's fields),
// m's payload and its event id.
func (c *consumer) received(ctx context.Context, m redis.XMessage) (context.Context, []byte, string) {
	carrier := propagation.MapCarrier{}
	var data []byte
	var eventID string
	for k, v := range m.Values {
		s, _ := v.(string)
		switch k {
		case FieldData:
			data = []byte(s)
		case FieldEventID:
			eventID = s
		default:
			carrier[k] = s
		}
	}
	return c.s.propagator.Extract(ctx, carrier), data, eventID
}

// call runs the handler in a goroutine of its own, so that every way it
// can end comes back here: an error, a panic (or an error whose Error
// method panics) and runtime.Goexit (t.FailNow) are failures.
func (c *consumer) call(ctx context.Context, m Message) error {
	done := make(chan error, 1)
	c.s.handlers.Add(1)
	go func() {
		var err error
		returned := false
		defer func() {
			c.s.handlers.Add(-1)
			if p := recover(); p != nil {
				text, _ := safetext.Of(p) // a value whose Error method panics must not end the process
				err = fmt.Errorf("streamfx: handler for %q panicked: %s", c.stream, text)
			} else if !returned {
				err = fmt.Errorf("streamfx: handler for %q called runtime.Goexit", c.stream)
			}
			if !returned {
				c.s.log.Error("stream handler did not return", zap.String("stream", c.stream), zap.String("message_id", m.ID), zap.Error(err))
			}
			done <- err
		}()
		err = safetext.Error(c.handler(ctx, m))
		returned = true
	}()
	return <-done
}

// ack acknowledges done in one XACK, each with its own stream.ack span. A
// message whose XACK fails stays pending: it runs again after ClaimIdle.
func (c *consumer) ack(done []handled) {
	ids := make([]string, len(done))
	spans := make([]*plugintrace.Span, len(done))
	for i, h := range done {
		ids[i] = h.id
		_, spans[i] = c.s.obs.start(h.ctx, trace.SpanKindInternal, "stream.ack", "XACK", attribute.String(AttrStream, c.stream))
	}
	sctx, cancel := c.storeCtx()
	err := c.s.rdb.XAck(sctx, c.stream, c.s.cfg.Group, ids...).Err()
	cancel()
	if err != nil {
		err = fmt.Errorf("streamfx: ack %d messages on %q: %w", len(ids), c.stream, err)
		c.s.log.Warn("stream ack failed", zap.Error(err))
	}
	for i, h := range done {
		if err == nil {
			spans[i].AddEvent("message.acknowledged")
		}
		spans[i].Finish(err)
		h.span.Finish(nil)
	}
}

// deadLetterUnsettled dead-letters, without running it, a claimed message
// whose MaxAttempts deliveries were never settled.
func (c *consumer) deadLetterUnsettled(ctx context.Context, m redis.XMessage, delivered int) {
	cfg := c.s.cfg
	reason := "delivered " + strconv.Itoa(cfg.MaxAttempts) + " times without being acknowledged"
	ctx, _, _ = c.received(ctx, m)
	ctx, span := c.s.obs.startConsume(ctx, c.stream, cfg.Group, cfg.Consumer, m.ID, delivered)
	err := errors.New(reason)
	c.s.obs.failed(span, c.stream, "", delivered, err)
	c.deadLetter(ctx, m, delivered, reason)
	span.Finish(err)
}

// deadLetter copies the message to "<stream>:dlq", then acknowledges it
// (two commands: the streams may be on different Cluster slots).
func (c *consumer) deadLetter(ctx context.Context, m redis.XMessage, attempts int, lastErr string) {
	dlq := c.stream + DLQSuffix
	c.s.obs.track(c.stream)
	ctx, span := c.s.obs.start(ctx, trace.SpanKindInternal, "stream.move_to_dlq", "XADD", attribute.String(AttrStream, c.stream),
		attribute.String(AttrMessageID, m.ID), attribute.String(AttrDLQStream, dlq), attribute.String(AttrReason, ReasonMaxRetriesExceeded))
	values := make([]any, 0, 2*len(m.Values)+10)
	for k, v := range m.Values {
		values = append(values, k, v)
	}
	values = append(values, FieldReason, ReasonMaxRetriesExceeded, FieldOriginalID, m.ID, FieldOriginalStream, c.stream,
		FieldAttempts, strconv.Itoa(attempts), FieldError, lastErr[:min(len(lastErr), 1024)])
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.s.cfg.StoreTimeout)
	defer cancel()
	_, err := c.s.append(sctx, dlq, values)
	if err == nil {
		err = c.s.rdb.XAck(sctx, c.stream, c.s.cfg.Group, m.ID).Err()
	}
	if err != nil {
		err = fmt.Errorf("streamfx: move %s to %q: %w", m.ID, dlq, err)
		c.s.log.Warn("stream dead-letter failed", zap.Error(err))
	} else {
		c.s.obs.count(c.stream, OutcomeDeadLettered)
		span.AddEvent("message.moved_to_dlq")
	}
	span.Finish(err)
}

// reclaim takes over messages pending longer than ClaimIdle (failed, or
// their consumer died): those delivered MaxAttempts times already are
// dead-lettered, the others handled again. It returns how many it claimed.
func (c *consumer) reclaim(loopCtx, handlerCtx, haltCtx context.Context) int {
	cfg := c.s.cfg
	sctx, cancel := c.storeCtx()
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
	fetched := time.Now()
	// XCLAIM re-checks the idle time: of two claimers, one gets each message.
	msgs, err := c.s.rdb.XClaim(sctx, &redis.XClaimArgs{
		Stream: c.stream, Group: cfg.Group, Consumer: cfg.Consumer, MinIdle: cfg.ClaimIdle, Messages: ids,
	}).Result()
	if err != nil {
		return 0
	}
	var retry []redis.XMessage
	for _, m := range msgs {
		if attempts[m.ID] > cfg.MaxAttempts {
			c.deadLetterUnsettled(handlerCtx, m, attempts[m.ID]-1)
		} else {
			retry = append(retry, m)
		}
	}
	c.handleBatch(loopCtx, handlerCtx, haltCtx, retry, attempts, fetched)
	return len(msgs)
}

// leave removes this consumer from the group if it holds no pending
// message (deleting one that does would drop its messages for good).
func (c *consumer) leave(ctx context.Context) {
	cfg := c.s.cfg
	ctx = plugintrace.WithoutCommandSpans(ctx)
	mine, err := c.s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.stream, Group: cfg.Group, Start: "-", End: "+", Count: 1, Consumer: cfg.Consumer}).Result()
	if err == nil && len(mine) == 0 {
		_ = c.s.rdb.XGroupDelConsumer(ctx, c.stream, cfg.Group, cfg.Consumer).Err()
	}
}

// touchScript resets the idle time of each given message this consumer
// still owns (XCLAIM … JUSTID counts no delivery) and answers 1 for each
// still its own, else 0. KEYS[1] stream; ARGV group, consumer, ids….
var touchScript = redis.NewScript(`
local out = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`)

// giveBackScript returns messages this consumer will not run as if never
// delivered: each one it still owns gets its delivery count set back and
// its idle time set to ClaimIdle, so any consumer claims it at once as the
// same attempt. KEYS[1] stream; ARGV group, consumer, idle ms, then pairs
// of id and delivery count.
var giveBackScript = redis.NewScript(`
local n = 0
for i = 4, #ARGV, 2 do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', ARGV[3], 'RETRYCOUNT', ARGV[i + 1], 'JUSTID')
    n = n + 1
  end
end
return n
`)

// giveBack returns msgs, so a stop costs none of them an attempt. If Redis
// does not answer, they stay pending, their delivery counted.
func (c *consumer) giveBack(msgs []redis.XMessage, attempts map[string]int) {
	if len(msgs) == 0 {
		return
	}
	cfg := c.s.cfg
	args := []any{cfg.Group, cfg.Consumer, cfg.ClaimIdle.Milliseconds()}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		args = append(args, m.ID, max(attempts[m.ID], 1)-1)
		ids[i] = m.ID
	}
	sctx, cancel := c.storeCtx()
	defer cancel()
	if err := giveBackScript.Run(sctx, c.s.rdb, []string{c.stream}, args...).Err(); err != nil {
		c.s.log.Warn("stream give-back failed: the messages stay pending, their delivery counted",
			zap.String("stream", c.stream), zap.Strings("message_ids", ids), zap.Error(err))
	}
}

// batch is the messages of one read or claim not settled yet, touched
// every ClaimIdle/4 all together.
type batch struct {
	c  *consumer
	mu sync.Mutex
	// held maps each held message to the send time of the last round trip
	// that found it ours: its idle time in Redis is at most the time since.
	held   map[string]time.Time
	lost   map[string]bool // taken over by another consumer
	acking map[string]bool // its XACK is on its way: a touch not finding it proves nothing
}

func (c *consumer) hold(msgs []redis.XMessage, fetched time.Time) *batch {
	b := &batch{c: c, held: make(map[string]time.Time, len(msgs)), lost: map[string]bool{}, acking: map[string]bool{}}
	for _, m := range msgs {
		b.held[m.ID] = fetched
	}
	return b
}

func (b *batch) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.held, id)
	delete(b.acking, id)
}

// acked notes that the XACK of done is about to be sent: a touch that
// then finds them no longer pending is no sign of another consumer.
func (b *batch) acked(done []handled) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range done {
		b.acking[h.id] = true
	}
}

func (b *batch) touch(ids []string, timeout time.Duration) {
	cfg := b.c.s.cfg
	ctx, cancel := context.WithTimeout(plugintrace.WithoutCommandSpans(context.Background()), timeout)
	defer cancel()
	args := []any{cfg.Group, cfg.Consumer}
	for _, id := range ids {
		args = append(args, id)
	}
	sent := time.Now()
	res, err := touchScript.Run(ctx, b.c.s.rdb, []string{b.c.stream}, args...).Int64Slice()
	if err != nil || len(res) != len(ids) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, id := range ids {
		if _, ok := b.held[id]; !ok {
			continue
		}
		if res[i] == 1 {
			b.held[id] = sent
		} else if !b.lost[id] && !b.acking[id] {
			b.lost[id] = true
			b.c.s.log.Warn("stream message held by this consumer was claimed by another", zap.String("stream", b.c.stream), zap.String("message_id", id))
		}
	}
}

// own reports whether id may start here: still ours as known from a round
// trip sent less than ClaimIdle/3 ago (else it asks Redis once more).
func (b *batch) own(id string) (owned, lost bool) {
	state := func() (owned, lost bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		last, held := b.held[id]
		return !b.lost[id] && held && time.Since(last) < b.c.s.cfg.ClaimIdle/3, b.lost[id]
	}
	if owned, lost = state(); owned || lost {
		return owned, lost
	}
	b.touch([]string{id}, b.c.s.cfg.StoreTimeout)
	return state()
}

// keepTouched touches every held message every ClaimIdle/4 until the
// returned stop is called or haltCtx ends.
func (b *batch) keepTouched(haltCtx context.Context) (stop func()) {
	every := b.c.s.cfg.ClaimIdle / 4
	ctx, cancel := context.WithCancel(haltCtx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			b.mu.Lock()
			ids := make([]string, 0, len(b.held))
			for id := range b.held {
				if !b.lost[id] {
					ids = append(ids, id)
				}
			}
			b.mu.Unlock()
			if len(ids) > 0 {
				b.touch(ids, min(b.c.s.cfg.StoreTimeout, 2*every))
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// forgetScript removes from a group every consumer other than the caller
// that holds no pending message and has not touched the group for ARGV[2]
// ms. Check and deletion are one script, so a consumer that reads a message
// in between cannot have it dropped; a live consumer deleted anyway is
// recreated by its next read.
// KEYS[1] stream; ARGV group, idle ms, caller.
var forgetScript = redis.NewScript(`
local removed = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[3] and tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    removed = removed + 1
  end
end
return removed
`)

// forgetDeadConsumers runs forgetScript at most every ForgetConsumersAfter/10.
func (c *consumer) forgetDeadConsumers(last *time.Time) {
	cfg := c.s.cfg
	if time.Since(*last) < cfg.ForgetConsumersAfter/10 {
		return
	}
	*last = time.Now()
	ctx, cancel := c.storeCtx()
	defer cancel()
	_ = forgetScript.Run(ctx, c.s.rdb, []string{c.stream}, cfg.Group, cfg.ForgetConsumersAfter.Milliseconds(), cfg.Consumer).Err()
}
