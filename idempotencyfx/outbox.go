package idempotencyfx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/internal/keyslot"
	"github.com/redisfx/redisfx/internal/nodeclient"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/internal/throttle"
	"github.com/redisfx/redisfx/plugintrace"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/streamfx"
)

// ErrNoOutbox is returned by Emit outside recorded work (no key, fail-open,
// not in a handler or Do function, or after it returned), and on a Service
// without streams (WithStreams).
var ErrNoOutbox = errors.New("idempotencyfx: no outbox for this event")

// Emit declares an event of the idempotent work running in ctx: data, to be
// appended to stream (a streamfx stream) once the work's outcome is
// recorded, in the same atomic step, and only then. A failed, refused or
// taken-over execution commits none, a replay runs none; committed events
// reach their stream exactly once, in the order emitted (docs/idempotency.md,
// "Events: the outbox"). The message carries ctx's trace context.
func Emit(ctx context.Context, stream string, data []byte) error {
	m, _ := ctx.Value(fenceKey{}).(*leaseMark)
	if m == nil {
		return fmt.Errorf("%w: no idempotent work runs in ctx (a request without a key, fail-open, or outside the handler)", ErrNoOutbox)
	}
	l := m.lease
	if l.s.outbox == nil {
		return fmt.Errorf("%w: the idempotency Service has no streams (streamfx.Module in the app, or WithStreams)", ErrNoOutbox)
	}
	ev := outboxEvent{stream: stream, data: string(data), emitter: trace.SpanContextFromContext(ctx)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended.Load() {
		return fmt.Errorf("%w: the work has returned", ErrNoOutbox)
	}
	l.events = append(l.events, ev)
	return nil
}

// outboxEvent is one declared event.
type outboxEvent struct {
	stream  string
	data    string
	emitter trace.SpanContext // the span that emitted it
}

// committed is a record whose events were committed with its outcome.
type committed struct {
	record string
	token  int64
	events []outboxEvent
	at     time.Time // committed, or first seen pending
}

// Relay timings: the recovery polls every outboxPoll, taking over entries
// left pending for outboxTakeover (their owner's own relay has had its turn).
const (
	outboxPoll     = 5 * time.Second
	outboxTakeover = 10 * time.Second
	outboxBatch    = 64  // deliveries per round trip
	outboxScan     = 100 // entries read per index and poll
)

// outboxTimings are the relay's timings; tests shorten them.
type outboxTimings struct{ poll, takeover time.Duration }

// outbox relays committed events to their streams: at once from the
// process that committed them, and by a recovery that polls the index for
// entries left behind (a crash, a failover, an outage).
type outbox struct {
	s                 *Service
	prefix            string
	cluster           bool
	maxLen, retention any    // of the streams, as the scripts take them (strings)
	box               string // the index off a Cluster
	queue             chan committed
	stop              chan struct{}
	done              chan struct{}
	started           atomic.Bool
	outboxTimings
	failedLog throttle.Every // at most every 10s

	// the last reading of the index, for the gauges
	readAt  atomic.Int64 // unix nanos
	pending atomic.Int64
	oldest  atomic.Int64 // unix ms of the oldest entry's commit; 0: none
}

func newOutbox(s *Service, streams *streamfx.Streams, t outboxTimings) *outbox {
	cfg := streams.Config()
	return &outbox{s: s, prefix: s.cfg.KeyPrefix, cluster: nodeclient.Cluster(s.store.rdb) != nil, box: s.cfg.KeyPrefix + ":outbox",
		maxLen: strconv.FormatInt(cfg.MaxLen, 10), retention: strconv.FormatInt(cfg.Retention.Milliseconds(), 10),
		queue: make(chan committed, 4*outboxBatch), stop: make(chan struct{}), done: make(chan struct{}), outboxTimings: t,
		failedLog: throttle.Every{Interval: 10 * time.Second}}
}

// index is the outbox index of record: in its slot on a Cluster.
func (o *outbox) index(record string) string {
	if !o.cluster {
		return o.box
	}
	return o.prefix + ":outbox{" + keyslot.ForSlot(keyslot.Of(record)) + "}"
}

// indexes are every index the recovery reads.
func (o *outbox) indexes() []string {
	if _, tagged := keyslot.Tag(o.prefix); !o.cluster || tagged {
		return []string{o.index(o.prefix)}
	}
	all := make([]string, keyslot.Slots)
	for slot := range all {
		all[slot] = o.prefix + ":outbox{" + keyslot.ForSlot(slot) + "}"
	}
	return all
}

// relaySoon hands committed events to the relay; when it is busy (or
// stopped), the recovery delivers them.
func (o *outbox) relaySoon(c committed) {
	select {
	case o.queue <- c:
	default:
	}
}

func (o *outbox) start() {
	if o.started.CompareAndSwap(false, true) {
		go o.run()
	}
}

// shutdown stops the relay, letting it deliver what is queued until ctx is
// done (then the Service's late work is cancelled, and the relay with it);
// what it has not delivered stays pending for the recovery of any process.
func (o *outbox) shutdown(ctx context.Context) {
	if !o.started.Load() {
		return
	}
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	select {
	case <-o.done:
	case <-ctx.Done():
	}
}

// stopped waits until the relay has stopped (after the late work's cancel).
func (o *outbox) stopped() {
	if o.started.Load() {
		<-o.done
	}
}

func (o *outbox) run() {
	defer close(o.done)
	poll := time.NewTicker(o.poll)
	defer poll.Stop()
	for {
		select {
		case c := <-o.queue:
			o.relay(o.batch(c))
		case <-poll.C:
			o.recoverPending()
		case <-o.stop:
			for len(o.queue) > 0 { // what was committed before the stop, within the stop's grace
				select {
				case c := <-o.queue:
					o.relay(o.batch(c))
				case <-o.s.late.stop.Done():
					return
				}
			}
			return
		}
	}
}

// batch is c and what else is queued, up to outboxBatch.
func (o *outbox) batch(c committed) []committed {
	b := []committed{c}
	for len(b) < outboxBatch {
		select {
		case c := <-o.queue:
			b = append(b, c)
		default:
			return b
		}
	}
	return b
}

// relay delivers each record's events, stream by stream, then ends its
// entry in the index. A record that fails stays pending: the recovery
// delivers it again, and the delivery markers let no event in twice.
func (o *outbox) relay(batch []committed) {
	ctx, cancel := o.callContext()
	defer cancel()
	failed := make([]error, len(batch))
	deliveries := make([][]delivery, len(batch))
	for i := range batch {
		deliveries[i] = o.deliveries(&batch[i])
	}
	if o.s.store.acks == 0 {
		o.pipelined(ctx, batch, failed, func(p redis.Pipeliner, i int) []*redis.Cmd {
			var cmds []*redis.Cmd
			for j := range deliveries[i] {
				d := &deliveries[i][j]
				d.cmd = idemscript.Deliver.EvalSha(ctx, p, d.keys, d.args...)
				cmds = append(cmds, d.cmd)
			}
			return cmds
		})
	} else {
		for i := range batch {
			for j := range deliveries[i] {
				if err := o.deliverReplicated(ctx, &deliveries[i][j]); err != nil && failed[i] == nil {
					failed[i] = err
				}
			}
		}
	}
	o.pipelined(ctx, batch, failed, func(p redis.Pipeliner, i int) []*redis.Cmd {
		c := &batch[i]
		return []*redis.Cmd{idemscript.Delivered.EvalSha(ctx, p, []string{c.record, o.index(c.record)}, strconv.FormatInt(c.token, 10))}
	})
	var err error
	for i, c := range batch {
		for _, d := range deliveries[i] {
			d.finish()
		}
		if failed[i] != nil {
			err = failed[i]
			o.s.obs.outboxFailure()
			continue
		}
		o.s.obs.outboxDelivered(time.Since(c.at))
	}
	if err != nil && o.failedLog.Allow() {
		o.s.log.Warn("idempotency: outbox events not delivered yet; the relay tries again", zap.Error(err))
	}
}

// pipelined sends the commands send makes for each record not failed yet,
// in one round trip per node, and marks the records whose commands failed.
func (o *outbox) pipelined(ctx context.Context, batch []committed, failed []error, send func(p redis.Pipeliner, i int) []*redis.Cmd) {
	sent := make([][]*redis.Cmd, len(batch))
	_, _ = o.s.store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range batch {
			if failed[i] == nil {
				sent[i] = send(p, i)
			}
		}
		return nil
	})
	for i, cmds := range sent {
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil && failed[i] == nil {
				failed[i] = err
				if redis.HasErrorPrefix(err, "NOSCRIPT") {
					_ = scripts.Preload(ctx, o.s.store.rdb, idemscript.Deliver, idemscript.Delivered)
				}
			}
		}
	}
}

// delivery is one Deliver script call: a record's events for one stream,
// each with its stream.publish span.
type delivery struct {
	keys    []string
	args    []any
	entries []eventEntry
	cmd     *redis.Cmd
	err     error // of a replicated delivery
}

// deliveries are c's Deliver calls, one per stream, the events of each in
// the order emitted.
func (o *outbox) deliveries(c *committed) []delivery {
	var out []delivery
	execution := c.record + "/" + strconv.FormatInt(c.token, 10)
	for i, ev := range c.events {
		if slices.IndexFunc(c.events[:i], func(e outboxEvent) bool { return e.stream == ev.stream }) >= 0 {
			continue
		}
		// In the stream's slot, named by the stream and the execution.
		marker := "{" + keyslot.ForSlot(keyslot.Of(ev.stream)) + "}" + o.prefix + ":outbox:" + strconv.Itoa(len(ev.stream)) + ":" + ev.stream + execution
		out = append(out, delivery{keys: []string{ev.stream, marker}})
		d := &out[len(out)-1]
		d.entries = o.eventArgs(&d.args, 1, c.events, execution, d.keys[:1], true)
		d.args[0] = o.markerTTL().Milliseconds()
	}
	return out
}

// eventArgs makes *args: head arguments left to the caller, then the
// events of streams as the scripts' append reads them. When spans, it
// starts their stream.publish spans: each a child of the span that emitted
// its event, carried by the message as Publish's is. Without, the message
// carries the emitter's context. The arguments point into streams and the
// entries returned, so that no string is boxed.
func (o *outbox) eventArgs(args *[]any, head int, events []outboxEvent, execution string, streams []string, spans bool) []eventEntry {
	tp := o.s.obs.tracer
	if tp == nil {
		tp = noop.NewTracerProvider() // the emitter's trace context still travels
	}
	*args = append(make([]any, head, head+3+len(streams)+8*len(events)), o.maxLen, o.retention, len(streams))
	for i := range streams {
		*args = append(*args, &streams[i])
	}
	entries := make([]eventEntry, len(events))
	for n := range events {
		ev := &events[n]
		key := slices.Index(streams, ev.stream) + 1
		if key == 0 {
			continue
		}
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), ev.emitter)
		e := &entries[n]
		if spans {
			ctx, e.span = plugintrace.StartKind(ctx, tp, trace.SpanKindProducer, "streams", "stream.publish", "XADD",
				attribute.String(streamfx.AttrStream, ev.stream), attribute.Int(streamfx.AttrMessageSize, len(ev.data)))
		}
		at := len(*args)
		e.args, e.id = args, execution+"/"+strconv.Itoa(n)
		// Pointers: go-redis writes a *string as its value, with no copy to box.
		*args = append(*args, key, 0, streamfx.FieldData, &ev.data, streamfx.FieldEventID, &e.id)
		propagation.TraceContext{}.Inject(ctx, e)
		(*args)[at+1] = len(*args) - at - 2
	}
	return entries
}

// eventEntry is what one event's stream entry holds beyond its data, and
// the carrier that appends its trace context's fields to its arguments.
type eventEntry struct {
	args           *[]any
	id             string // event_id
	traceK, traceV string // the first trace context field (traceparent)
	span           *plugintrace.Span
}

// Get implements propagation.TextMapCarrier; the fields are only written.
func (e *eventEntry) Get(string) string { return "" }

// Keys implements propagation.TextMapCarrier.
func (e *eventEntry) Keys() []string { return nil }

// Set implements propagation.TextMapCarrier: the field follows the others.
func (e *eventEntry) Set(k, v string) {
	if e.traceK != "" {
		*e.args = append(*e.args, k, v)
		return
	}
	e.traceK, e.traceV = k, v
	*e.args = append(*e.args, &e.traceK, &e.traceV)
}

// eventCommit is what the Complete script takes to commit events: the
// record, the index and the streams when they are on the record's node
// (always, but on a Cluster where their slots differ), and the arguments.
type eventCommit struct {
	keys      []string
	args      []any
	entries   []eventEntry
	inline    [3]string // keys' array for one stream
	recording bool      // a span records: the reply carries the message ids
}

// commit prepares the events of record's execution token for Complete:
// its keys, and its arguments after the four of every completion: whether
// to reply the message ids (only a recording span reads them), then the
// events.
func (o *outbox) commit(record string, token int64, events []outboxEvent) *eventCommit {
	ev := &eventCommit{}
	ev.keys = append(ev.inline[:0], record, o.index(record))
	for _, e := range events {
		if !slices.Contains(ev.keys[2:], e.stream) {
			ev.keys = append(ev.keys, e.stream)
		}
	}
	streams := ev.keys[2:]
	here := !o.cluster || !slices.ContainsFunc(streams, func(s string) bool { return keyslot.Of(s) != keyslot.Of(record) })
	ev.entries = o.eventArgs(&ev.args, 5, events, record+"/"+strconv.FormatInt(token, 10), streams, here)
	ev.recording = slices.ContainsFunc(ev.entries, func(e eventEntry) bool { return e.span != nil && e.span.IsRecording() })
	ev.args[4] = "0"
	if ev.recording {
		ev.args[4] = "1"
	}
	if !here {
		ev.keys = ev.keys[:2] // the streams are the relay's to append to
	}
	return ev
}

// finish ends the spans of events appended with the outcome: ids are
// theirs, none when they went to the relay (which publishes them anew).
func (ev *eventCommit) finish(ids []any, err error) {
	if err == nil && len(ids) == 0 && ev.recording {
		err = errors.New("not appended by this completion: the relay appends it, or an earlier try did")
	}
	finishSpans(ev.entries, ids, err)
}

// finish ends the delivery's spans with its outcome: the message ids when
// it appended, nothing more when a marker said an earlier try had.
func (d *delivery) finish() {
	var ids []any
	err := d.err
	if d.cmd != nil {
		ids, _ = d.cmd.Val().([]any) // 0 when a marker said an earlier try appended them
		err = cmp.Or(err, d.cmd.Err())
	}
	finishSpans(d.entries, ids, err)
}

// finishSpans ends the spans of entries (those of events appended, in
// order; others have none) with ids, the appended messages'.
func finishSpans(entries []eventEntry, ids []any, err error) {
	i := 0
	for _, e := range entries {
		if e.span == nil {
			continue
		}
		if i < len(ids) && e.span.IsRecording() {
			id, _ := ids[i].(string)
			e.span.SetAttributes(attribute.String(streamfx.AttrMessageID, id))
			e.span.AddEvent("message.published")
		}
		i++
		e.span.Finish(err)
	}
}

// markerTTL is how long a delivery marker lives: as long as the record
// that could be delivered again, and a day for records that never expire.
func (o *outbox) markerTTL() time.Duration {
	if o.s.cfg.DefaultTTL > 0 {
		return o.s.cfg.DefaultTTL
	}
	return 24 * time.Hour
}

// deliverReplicated runs one delivery and WAITs for ReplicaAcks replicas:
// the record's events are not let go before their append is replicated.
func (o *outbox) deliverReplicated(ctx context.Context, d *delivery) error {
	cmd, unreplicated, err := o.s.store.runArgs(ctx, idemscript.Deliver, d.keys, d.args, func(*redis.Cmd) bool { return true })
	if err == nil && unreplicated {
		err = errors.New("the append did not reach ReplicaAcks replicas in time")
	}
	d.cmd, d.err = cmd, err
	return err
}

// recoverPending reads the index, for the gauges and for the entries left
// pending past outboxTakeover, and delivers those. One process per poll
// does it (a lease in Redis). On a Cluster it reads one index per slot,
// outboxChunk at a time, each chunk within its own StoreTimeout; a node
// that failed a read is not asked again in the poll, so that it costs the
// poll one StoreTimeout, not one per chunk (the relay of this process's own
// commits waits for the poll).
func (o *outbox) recoverPending() {
	ctx, cancel := o.callContext()
	rdb := o.s.store.rdb
	leased, err := rdb.SetNX(ctx, o.prefix+":outbox:relay", 1, o.poll-o.poll/10).Result()
	now, _ := rdb.Time(ctx).Result()
	cancel()
	if err != nil || !leased || now.IsZero() {
		return
	}
	// An index that cannot be read (its node down or slow) is skipped, not
	// the poll: what the other nodes hold is delivered all the same.
	r := indexReading{takeover: now.Add(-o.takeover).UnixMilli(), seen: map[string]bool{}, down: map[string]bool{}}
	for indexes := o.indexes(); len(indexes) > 0; indexes = indexes[min(len(indexes), outboxChunk):] {
		r.read(o, indexes[:min(len(indexes), outboxChunk)])
	}
	if len(r.down) == 0 {
		o.pending.Store(r.pending)
		o.oldest.Store(r.oldest)
		o.readAt.Store(time.Now().UnixNano())
	}
	for due := r.due; len(due) > 0; due = due[min(len(due), outboxBatch):] {
		o.relay(o.read(due[:min(len(due), outboxBatch)]))
	}
}

// outboxChunk is how many indexes one round trip of the recovery reads.
const outboxChunk = 512

// indexReading is what the recovery has read of the indexes so far.
type indexReading struct {
	takeover        int64 // entries committed before it (Redis ms) are due
	pending, oldest int64
	due             []committed
	seen            map[string]bool
	down            map[string]bool // nodes (addresses) that failed a read
}

// read reads indexes: each one's oldest entries, its size and, beyond the
// oldest, a random sample, so that entries that keep failing (a stream
// under a key of another type) hold up no others. The nodes of indexes it
// could not read go into r.down, and their indexes are skipped from then on.
func (r *indexReading) read(o *outbox, indexes []string) {
	ctx, cancel := o.callContext()
	defer cancel()
	node := func(index string) string {
		if c, _ := nodeclient.ForKey(ctx, o.s.store.rdb, index); c != nil {
			return c.Options().Addr
		}
		return ""
	}
	if len(r.down) > 0 {
		indexes = slices.DeleteFunc(slices.Clone(indexes), func(index string) bool { return r.down[node(index)] })
	}
	firsts := make([]*redis.ZSliceCmd, len(indexes))
	counts := make([]*redis.IntCmd, len(indexes))
	_, _ = o.s.store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, index := range indexes {
			firsts[i], counts[i] = p.ZRangeWithScores(ctx, index, 0, outboxScan-1), p.ZCard(ctx, index)
		}
		return nil
	})
	for i, index := range indexes {
		if counts[i].Err() != nil {
			r.down[node(index)] = true
		}
	}
	var sampled []*redis.ZSliceCmd
	_, _ = o.s.store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, index := range indexes {
			if counts[i].Val() > outboxScan {
				sampled = append(sampled, p.ZRandMemberWithScores(ctx, index, outboxScan))
			}
		}
		return nil
	})
	for i := range indexes {
		r.pending += counts[i].Val()
	}
	for _, read := range append(firsts, sampled...) {
		for _, z := range read.Val() {
			if r.oldest == 0 || int64(z.Score) < r.oldest {
				r.oldest = int64(z.Score)
			}
			if record, _ := z.Member.(string); int64(z.Score) < r.takeover && !r.seen[record] {
				r.seen[record] = true
				r.due = append(r.due, committed{record: record, at: time.UnixMilli(int64(z.Score))})
			}
		}
	}
}

// callContext bounds one round trip of the relay by StoreTimeout; it ends
// with the Service, and its commands make no span. They pass the circuit
// breaker as completions do, and their failures, background work's, do not
// open it for the requests.
func (o *outbox) callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(plugintrace.WithoutCommandSpans(storefx.BypassBreaker(o.s.late.stop)), o.s.cfg.StoreTimeout)
}

// read fills in the pending events of records; a record that holds none
// (expired, deleted) comes with none, and relay ends its entry.
func (o *outbox) read(records []committed) []committed {
	ctx, cancel := o.callContext()
	defer cancel()
	cmds := make([]*redis.SliceCmd, len(records))
	_, _ = o.s.store.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range records {
			cmds[i] = p.HMGet(ctx, r.record, "n", "e")
		}
		return nil
	})
	var out []committed
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if err != nil {
			continue
		}
		c := records[i]
		if n, ok := v[0].(string); ok {
			c.token, _ = strconv.ParseInt(n, 10, 64)
		}
		if e, ok := v[1].(string); ok {
			c.events = decodeEvents(e)
		}
		out = append(out, c)
	}
	return out
}

// decodeEvents reads the events the Complete script kept in a record
// (field 'e': eventArgs's arguments, each as <length>:<bytes>).
func decodeEvents(e string) []outboxEvent {
	var args []string
	for e != "" {
		n, rest, _ := strings.Cut(e, ":")
		size, _ := strconv.Atoi(n)
		size = min(max(size, 0), len(rest))
		args, e = append(args, rest[:size]), rest[size:]
	}
	// MaxLen, retention, the streams, then the events (see eventArgs).
	var events []outboxEvent
	nstreams, _ := strconv.Atoi(at(args, 2))
	for i := 3 + nstreams; i+1 < len(args); {
		key, _ := strconv.Atoi(args[i])
		fields, _ := strconv.Atoi(args[i+1])
		carrier := propagation.MapCarrier{}
		for j := i + 2; j+1 < min(i+2+fields, len(args)); j += 2 {
			carrier[args[j]] = args[j+1]
		}
		events = append(events, outboxEvent{stream: at(args, 2+key), data: carrier[streamfx.FieldData],
			emitter: trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))})
		i += 2 + max(fields, 0)
	}
	return events
}

// at is s[i], or "" past its end.
func at(s []string, i int) string {
	if i < 0 || i >= len(s) {
		return ""
	}
	return s[i]
}
