package streamfx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
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
	ctx = plugintrace.WithoutCommandSpans(ctx) // a start or a recovery is not a trace
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

// bg marks a background context: its Redis commands make no command span,
// so an idle consumer does not start a trace per poll.
func bg() context.Context { return plugintrace.WithoutCommandSpans(context.Background()) }

// run reads until loopCtx ends: abandoned and failed messages first (every
// ClaimIdle/2), then new ones. Reads are not cancelled mid-way (a reply cut
// off would leave its messages pending until the next claim); Block (at
// most StopTimeout/2) bounds how long stopping waits for one. haltCtx ends
// when a stop gives up on handlers that ignore their cancellation.
func (c *consumer) run(loopCtx, handlerCtx, haltCtx context.Context) {
	cfg := c.s.cfg
	var lastClaim, lastForget time.Time
	pause := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for loopCtx.Err() == nil {
		if time.Since(lastClaim) >= cfg.ClaimIdle/2 {
			lastClaim = time.Now()
			c.forgetDeadConsumers(&lastForget)
			// A full batch means more may wait: drain a few batches, then
			// read new messages too.
			for range 10 {
				if c.reclaim(loopCtx, handlerCtx, haltCtx) < cfg.BatchSize || loopCtx.Err() != nil {
					break
				}
			}
		}
		rctx, cancel := context.WithTimeout(bg(), durations.Add(cfg.Block, cfg.StoreTimeout))
		fetched := time.Now()
		res, err := c.s.rdb.XReadGroup(rctx, &redis.XReadGroupArgs{
			Group: cfg.Group, Consumer: cfg.Consumer, Streams: []string{c.stream, ">"}, Count: int64(cfg.BatchSize), Block: cfg.Block,
		}).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			if redis.HasErrorPrefix(err, "NOGROUP") { // the stream or group was deleted (or Redis restarted empty)
				// From "0" whatever StartID says: every message now in the
				// stream came after the loss, or is delivered again.
				gctx, cancel := context.WithTimeout(bg(), cfg.StoreTimeout)
				if c.ensureGroup(gctx, "0") == nil {
					cancel()
					continue // at once: nothing to wait for
				}
				cancel()
			}
			c.s.log.Warn("stream read failed", zap.String("stream", c.stream), zap.Error(err))
			pause.Wait(loopCtx)
			continue
		}
		pause.Reset()
		for _, st := range res {
			c.handleBatch(loopCtx, handlerCtx, haltCtx, st.Messages, nil, fetched)
		}
	}
}

// handleBatch handles msgs with up to Concurrency at once; attempts gives
// each message's delivery number (nil: first deliveries), fetched when the
// read or claim that delivered them was sent.
//
// Every message of the batch is held from the fetch until it is settled,
// and all held messages are kept touched together (one round trip every
// ClaimIdle/4), whether running, waiting for their turn or waiting for the
// ack: none looks abandoned to another consumer. A message waiting for its
// turn starts only if this consumer still owns it, as known within the
// last ClaimIdle/3 (else one more round trip checks); one it lost is not
// run. Once the loop stops, waiting messages are not started but given
// back at once, and so is each message whose run the stop cancelled, as
// soon as its handler returns (see giveBack). Each message handled
// successfully is acknowledged as soon as its handler returns, not after
// the batch: a stop may abandon another handler of the batch, and a
// success waiting for it would be claimed and run again elsewhere. The
// acks of one batch go out one XACK at a time; the successes that come
// while one is in flight share the next.
func (c *consumer) handleBatch(loopCtx, handlerCtx, haltCtx context.Context, msgs []redis.XMessage, attempts map[string]int, fetched time.Time) {
	if len(msgs) == 0 {
		return
	}
	b := c.hold(msgs, fetched)
	stopTouching := b.keepTouched(haltCtx)
	sem := make(chan struct{}, c.s.cfg.Concurrency)
	acks := &acker{c: c, b: b}
	var (
		wg         sync.WaitGroup
		notStarted []redis.XMessage // the stop came first: given back
	)
	attemptOf := func(id string) int {
		if a, ok := attempts[id]; ok {
			return a
		}
		return 1
	}
	for _, m := range msgs {
		acquired := false
		select { // a stop does not wait for a free slot
		case sem <- struct{}{}:
			acquired = true
		case <-loopCtx.Done():
		}
		if loopCtx.Err() != nil { // stopping: not started
			if acquired {
				<-sem
			}
			b.drop(m.ID)
			notStarted = append(notStarted, m)
			continue
		}
		if owned, lost := b.own(m.ID); !owned {
			<-sem
			b.drop(m.ID)
			if lost {
				c.s.log.Warn("stream message lost to another consumer before it ran; not run here",
					zap.String("stream", c.stream), zap.String("message_id", m.ID))
			} else {
				c.s.log.Warn("stream message not run: Redis did not confirm this consumer still owns it; it stays pending, its delivery counted",
					zap.String("stream", c.stream), zap.String("message_id", m.ID))
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, out := c.process(handlerCtx, m, attemptOf(m.ID))
			<-sem // the next message need not wait for this one's bookkeeping
			switch out {
			case outcomeDone: // acknowledged now, not after the batch: another handler of it may be abandoned
				acks.add(h)
			case outcomeStopped: // given back at once, not after the batch: another handler of it may be abandoned
				b.drop(m.ID)
				c.giveBack([]redis.XMessage{m}, attemptOf)
			default: // failed: left for a retry after ClaimIdle, or dead-lettered
				b.drop(m.ID)
			}
		}()
	}
	// Given back now, not after the running handlers: one may be abandoned.
	c.giveBack(notStarted, attemptOf)
	wg.Wait()
	stopTouching()
}

// acker acknowledges a batch's successes as they come: one XACK at a time
// per batch, each carrying every success that came while the previous one
// was in flight. A message stays held (touched) until its XACK returns.
type acker struct {
	c       *consumer
	b       *batch
	mu      sync.Mutex
	queue   []handled
	sending bool // a goroutine is sending the batch's XACKs
}

// add queues h for the ack. Unless a goroutine of the batch is sending
// XACKs already (it picks h up next), the caller sends them itself until
// none is queued.
func (a *acker) add(h handled) {
	a.mu.Lock()
	a.queue = append(a.queue, h)
	if a.sending {
		a.mu.Unlock()
		return
	}
	a.sending = true
	for len(a.queue) > 0 {
		q := a.queue
		a.queue = nil
		a.mu.Unlock()
		a.b.acked(q)
		a.c.ack(q)
		for _, h := range q {
			a.b.drop(h.id)
		}
		a.mu.Lock()
	}
	a.sending = false
	a.mu.Unlock()
}

// handled is a message whose handler succeeded, waiting for its ack: its
// consume span is still open and it is still held (touched).
type handled struct {
	id   string
	ctx  context.Context
	span *plugintrace.Span
}

// outcome is how one run of a handler ended.
type outcome int

const (
	outcomeDone    outcome = iota // succeeded: acknowledge
	outcomeFailed                 // failed: retry after ClaimIdle, or dead-letter
	outcomeStopped                // cancelled by a stop: no attempt spent
)

// process runs the handler on one delivery. On success it returns the
// message for its ack; on failure it settles the message itself:
// dead-letter after the last attempt, else leave it pending for a retry
// after ClaimIdle. A run whose context the stop cancelled (StopTimeout ran
// out) did not fail: whatever it returns, it is not counted, never
// dead-lettered, and its message is given back.
func (c *consumer) process(ctx context.Context, m redis.XMessage, attempt int) (handled, outcome) {
	ctx, data := c.received(ctx, m)
	ctx, span := c.s.obs.startConsume(ctx, c.stream, c.s.cfg.Group, c.s.cfg.Consumer, m.ID, attempt)
	err := c.call(ctx, Message{ID: m.ID, Stream: c.stream, Data: data, Attempt: attempt})
	if err == nil {
		c.s.obs.processed(span, c.stream)
		return handled{id: m.ID, ctx: ctx, span: span}, outcomeDone
	}
	if ctx.Err() != nil { // the stop cancelled it
		c.s.obs.endConsume(span, fmt.Errorf("streamfx: stopped before the handler finished: %w", err))
		return handled{}, outcomeStopped
	}
	c.s.obs.failed(span, c.stream, attempt, err)
	if attempt >= c.s.cfg.MaxAttempts {
		c.deadLetter(ctx, m, attempt, err.Error())
	} else {
		c.keepForRetry()
	}
	c.s.obs.endConsume(span, err)
	return handled{}, outcomeFailed
}

// keepForRetry renews the stream's expiry (Retention) after a failed
// attempt, as a publish does: only publishes renewed it, so messages that
// kept failing after the last publish expired with their stream before
// their last attempt and their dead-letter entry, whenever a backlog or a
// slow handler made their retries outlast the Retention (helper-78,
// helper-79: 12 of a burst of 30, and every message of a 400 ms handler,
// with ClaimIdle 200 ms and a Retention of 1.2 s). GT: a stream without
// expiry keeps none. Every failed attempt renews it, not throttled as
// publishes are: a failure inside a publish's renewal interval kept the
// stream only Retention minus that interval, and its retry, behind a
// backlog, found the stream gone (helper-80). A failure costs a handler
// run and a claim already; one PEXPIRE more is small beside them.
func (c *consumer) keepForRetry() {
	if c.s.cfg.Retention == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(bg(), c.s.cfg.StoreTimeout)
	defer cancel()
	_ = c.s.rdb.Do(ctx, "PEXPIRE", c.stream, c.s.cfg.Retention.Milliseconds(), "GT").Err() // a failure renews with the next one
}

// received returns ctx in the producer's trace (the context carried in
// m's fields) and m's payload.
func (c *consumer) received(ctx context.Context, m redis.XMessage) (context.Context, []byte) {
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
	return c.s.propagator.Extract(ctx, carrier), data
}

// deadLetterUnsettled dead-letters a claimed message that had been
// delivered (at least MaxAttempts) times already, its last delivery never settled (its
// consumer crashed, or a stop abandoned its handler): it is not run. Like
// a run, it has a stream.consume span in the producer's trace, the parent
// of its stream.move_to_dlq span.
func (c *consumer) deadLetterUnsettled(ctx context.Context, m redis.XMessage, delivered int) {
	cfg := c.s.cfg
	reason := "delivered " + strconv.Itoa(cfg.MaxAttempts) + " times without being acknowledged"
	ctx, _ = c.received(ctx, m)
	ctx, span := c.s.obs.startConsume(ctx, c.stream, cfg.Group, cfg.Consumer, m.ID, delivered)
	err := errors.New(reason)
	c.s.obs.unsettled(span, delivered, err)
	c.deadLetter(ctx, m, delivered, reason)
	c.s.obs.endConsume(span, err)
}

// ack acknowledges the handled messages in one XACK; each keeps its own
// stream.ack span. A message whose XACK fails stays pending: it is claimed
// and run again after ClaimIdle (a lost acknowledgement).
func (c *consumer) ack(done []handled) {
	if len(done) == 0 {
		return
	}
	ids := make([]string, len(done))
	spans := make([]*plugintrace.Span, len(done))
	for i, h := range done {
		ids[i] = h.id
		_, spans[i] = c.s.obs.startAck(h.ctx, c.stream)
	}
	sctx, cancel := context.WithTimeout(bg(), c.s.cfg.StoreTimeout) // one XACK for many spans: no command span
	err := c.s.rdb.XAck(sctx, c.stream, c.s.cfg.Group, ids...).Err()
	cancel()
	if err != nil {
		// Not lost: the messages stay pending and are handled again after
		// ClaimIdle (handlers must tolerate redelivery, as with any stream).
		err = fmt.Errorf("streamfx: ack %d messages on %q: %w", len(ids), c.stream, err)
		c.s.log.Warn("stream ack failed", zap.Error(err))
	}
	for i, h := range done {
		c.s.obs.endAck(spans[i], err)
		c.s.obs.endConsume(h.span, nil)
	}
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
				// Through safetext: a value whose Error method panics would end the process if printed.
				text, _ := safetext.Of(p)
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
func (c *consumer) reclaim(loopCtx, handlerCtx, haltCtx context.Context) (claimed int) {
	cfg := c.s.cfg
	sctx, cancel := context.WithTimeout(bg(), cfg.StoreTimeout)
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
	fetched := time.Now()
	msgs, err := c.s.rdb.XClaim(sctx, &redis.XClaimArgs{
		Stream: c.stream, Group: cfg.Group, Consumer: cfg.Consumer, MinIdle: cfg.ClaimIdle, Messages: ids,
	}).Result()
	if err != nil {
		return 0
	}
	var retry []redis.XMessage
	for _, m := range msgs {
		if attempts[m.ID] > cfg.MaxAttempts { // its last attempt's consumer died before settling it
			c.deadLetterUnsettled(handlerCtx, m, attempts[m.ID]-1)
			continue
		}
		retry = append(retry, m)
	}
	c.handleBatch(loopCtx, handlerCtx, haltCtx, retry, attempts, fetched)
	return len(msgs)
}

// leave removes this consumer from the group if it holds no pending
// message, so that the group's consumer list does not grow with every
// process start. A consumer that still holds messages stays: deleting it
// would drop them from the pending list, and they would never be retried.
func (c *consumer) leave(ctx context.Context) {
	cfg := c.s.cfg
	ctx = plugintrace.WithoutCommandSpans(ctx)
	mine, err := c.s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.stream, Group: cfg.Group, Start: "-", End: "+", Count: 1, Consumer: cfg.Consumer}).Result()
	if err != nil || len(mine) > 0 {
		return
	}
	_ = c.s.rdb.XGroupDelConsumer(ctx, c.stream, cfg.Group, cfg.Consumer).Err()
}

// touchScript resets the idle time of each given pending message this
// consumer still owns (XCLAIM … JUSTID does not count a delivery) and
// answers, for each, 1 if it was still this consumer's, else 0.
// KEYS[1] stream; ARGV group, consumer, ids….
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

// giveBackScript returns messages this consumer will not run (a stop
// cancelled them or came before their turn) as if never delivered: for each
// one it still owns, the delivery count is set back (RETRYCOUNT) and the
// idle time to ClaimIdle, so that any consumer claims it at once and runs
// it as the same attempt. KEYS[1] stream; ARGV group, consumer, idle ms,
// then pairs of id and delivery count.
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

// giveBack returns msgs with their delivery count set back, so a stop
// costs none of them an attempt. If Redis does not answer, they stay
// pending as they are (claimed after ClaimIdle, the delivery counted).
func (c *consumer) giveBack(msgs []redis.XMessage, attemptOf func(string) int) {
	if len(msgs) == 0 {
		return
	}
	cfg := c.s.cfg
	args := []any{cfg.Group, cfg.Consumer, cfg.ClaimIdle.Milliseconds()}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		args = append(args, m.ID, attemptOf(m.ID)-1)
		ids[i] = m.ID
	}
	sctx, cancel := context.WithTimeout(bg(), cfg.StoreTimeout)
	defer cancel()
	if err := giveBackScript.Run(sctx, c.s.rdb, []string{c.stream}, args...).Err(); err != nil {
		c.s.log.Warn("stream give-back failed: the messages stay pending, their delivery counted",
			zap.String("stream", c.stream), zap.Strings("message_ids", ids), zap.Error(err))
	}
}

// batch is the set of messages one read or claim gave this consumer that
// are not settled yet: held from the fetch until acknowledged,
// dead-lettered, failed (left for a retry) or given back.
type batch struct {
	c  *consumer
	mu sync.Mutex
	// held maps each held message to the send time of the last round trip
	// that found it this consumer's (the fetch, or a touch): its idle time
	// in Redis is at most the time since.
	held   map[string]time.Time
	lost   map[string]bool // taken over by another consumer
	acking map[string]bool // its XACK is on its way: a touch that no longer finds it pending proves nothing
}

func (c *consumer) hold(msgs []redis.XMessage, fetched time.Time) *batch {
	b := &batch{c: c, held: make(map[string]time.Time, len(msgs)), lost: map[string]bool{}, acking: map[string]bool{}}
	for _, m := range msgs {
		b.held[m.ID] = fetched
	}
	return b
}

// drop stops holding id (it is settled, or lost).
func (b *batch) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.held, id)
	delete(b.acking, id)
}

// acked notes that the XACK of done is about to be sent: a touch sent
// before it may reach Redis after it and find them no longer pending, which
// is no sign of another consumer (they stay held, and touched, until the
// XACK returns).
func (b *batch) acked(done []handled) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range done {
		b.acking[h.id] = true
	}
}

// touch resets the idle time of ids, and records which are still ours.
func (b *batch) touch(ctx context.Context, ids []string) {
	cfg := b.c.s.cfg
	sent := time.Now()
	res, err := touchScript.Run(ctx, b.c.s.rdb, []string{b.c.stream}, append([]any{cfg.Group, cfg.Consumer}, toAny(ids)...)...).Int64Slice()
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

// own reports whether id may start here: still this consumer's, as known
// from a round trip sent less than ClaimIdle/3 ago (else it asks Redis
// once more). Another consumer claims a message only after ClaimIdle
// untouched; the next touch is sent within ClaimIdle/4, so the message
// stays this consumer's as long as that touch reaches Redis within the
// remaining 5/12 of ClaimIdle.
func (b *batch) own(id string) (owned, lost bool) {
	limit := b.c.s.cfg.ClaimIdle / 3
	state := func() (owned, lost bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.lost[id] {
			return false, true
		}
		last, held := b.held[id]
		return held && time.Since(last) < limit, false
	}
	if owned, lost = state(); owned || lost {
		return owned, lost
	}
	ctx, cancel := context.WithTimeout(bg(), b.c.s.cfg.StoreTimeout)
	b.touch(ctx, []string{id})
	cancel()
	return state()
}

// keepTouched touches every held message every ClaimIdle/4 until the
// returned stop is called or haltCtx ends.
func (b *batch) keepTouched(haltCtx context.Context) (stop func()) {
	every := b.c.s.cfg.ClaimIdle / 4
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-haltCtx.Done():
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
			if len(ids) == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(bg(), min(b.c.s.cfg.StoreTimeout, 2*every))
			b.touch(ctx, ids)
			cancel()
		}
	}()
	return func() { close(done); <-finished }
}

func toAny(ids []string) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}
