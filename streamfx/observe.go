package streamfx

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/plugin"
	"github.com/redisfx/redisfx/plugintrace"
)

// Option adds an optional collaborator to New.
type Option = plugin.Option

// WithRegisterer registers the stream metrics with reg. A nil reg registers nothing.
func WithRegisterer(reg prometheus.Registerer) Option { return plugin.WithRegisterer(reg) }

// WithTracerProvider opens the stream spans with tp (tracingfx's plugin
// tracer: a no-op unless PluginTracing is on).
func WithTracerProvider(tp trace.TracerProvider) Option { return plugin.WithTracerProvider(tp) }

// WithLogger logs handler panics and store failures.
// A nil log is ignored. The logger is named "streams".
func WithLogger(log *zap.Logger) Option { return plugin.WithLogger(log) }

// Attribute names of the stream spans: without a prefix, as the tracing
// spec gives them.
const (
	AttrStream      = "stream"
	AttrGroup       = "group"
	AttrConsumer    = "consumer"
	AttrMessageID   = "message_id"
	AttrMessageSize = "message_size"
	AttrDLQStream   = "dlq_stream"
	AttrReason      = "reason"
)

// Outcomes, the values of stream_messages_total's outcome label.
const (
	OutcomeProcessed    = "processed"
	OutcomeFailed       = "failed"
	OutcomeDeadLettered = "dead_lettered"
)

type observer struct {
	tracer   trace.TracerProvider
	messages *prometheus.CounterVec // registered only with a registerer
	backlog  *backlogReader         // nil without a registerer

	mu      sync.Mutex
	streams map[string]bool // streams this process publishes to or consumes
}

func newObserver(reg prometheus.Registerer, tp trace.TracerProvider, s *Streams) (*observer, error) {
	o := &observer{tracer: tp, streams: map[string]bool{},
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stream_messages_total", Help: "Message deliveries handled by this process, by outcome: processed, failed, dead_lettered."}, []string{"stream", "outcome"})}
	if reg == nil {
		return o, nil
	}
	o.backlog = &backlogReader{s: s, o: o, every: backlogInterval, kick: make(chan struct{}, 1),
		length: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stream_length", Help: "Entries in a stream (dead-letter streams included, named <stream>:dlq). Read every 5s; the last value is kept while Redis does not answer."}, []string{"stream"}),
		lag:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stream_consumer_lag", Help: "Entries of a stream the consumer group has not acknowledged yet: not yet delivered (XINFO GROUPS lag, counted up to 10001 when Redis answers it as NULL after an XDEL) plus delivered and pending. Read every 5s; the last value is kept while Redis does not answer."}, []string{"stream", "group"})}
	return o, plugin.Register(reg, o.messages, o.backlog.length, o.backlog.lag)
}

// track adds stream to the known streams; true if it is new to this process.
func (o *observer) track(stream string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	added := !o.streams[stream]
	o.streams[stream] = true
	return added
}

// readSoon asks the background reader of the backlog, if running, for a
// reading now rather than at its next interval, without waiting for it.
func (o *observer) readSoon() {
	if o.backlog != nil {
		select {
		case o.backlog.kick <- struct{}{}:
		default: // one is already asked for
		}
	}
}

func (o *observer) known() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.streams))
}

func (o *observer) count(stream, outcome string) {
	o.messages.WithLabelValues(stream, outcome).Inc()
}

func (o *observer) start(ctx context.Context, kind trace.SpanKind, name, op string, attrs ...attribute.KeyValue) (context.Context, *plugintrace.Span) {
	return plugintrace.StartKind(ctx, o.tracer, kind, "streams", name, op, attrs...)
}

func (o *observer) startConsume(ctx context.Context, stream, group, consumer, id string, attempt int) (context.Context, *plugintrace.Span) {
	ctx, span := o.start(ctx, trace.SpanKindConsumer, "stream.consume", "XREADGROUP", attribute.String(AttrStream, stream),
		attribute.String(AttrGroup, group), attribute.String(AttrConsumer, consumer), attribute.String(AttrMessageID, id))
	span.AddEvent("message.received", trace.WithAttributes(attribute.Int("attempt", attempt)))
	return ctx, span
}

// failed records on span that an attempt failed, or ended unsettled
// (counted only when outcome is given).
func (o *observer) failed(span *plugintrace.Span, stream, outcome string, attempt int, err error) {
	if outcome != "" {
		o.count(stream, outcome)
	}
	span.AddEvent("processing.failed", trace.WithAttributes(attribute.Int("attempt", attempt), attribute.String("error", err.Error())))
}

// backlogReader sets stream_length and stream_consumer_lag from Redis in
// the background; a scrape serves the last reading and never waits for
// Redis. A value Redis could not give keeps its last reading.
type backlogReader struct {
	s     *Streams
	o     *observer
	every time.Duration // backlogInterval; shorter in tests
	kick  chan struct{} // asks refresh for a reading now (buffered 1: asks coalesce)
	// afterRead, if set (tests), is called after each background reading.
	afterRead   func()
	length, lag *prometheus.GaugeVec
}

// backlogInterval is how often a running Streams reads its backlog.
const backlogInterval = 5 * time.Second

// refresh reads the backlog now, every backlogInterval and when nudged.
func (b *backlogReader) refresh(ctx context.Context) {
	tick := time.NewTicker(b.every)
	defer tick.Stop()
	ctx = plugintrace.WithoutCommandSpans(ctx) // background polling is not a trace
	select {
	case <-b.kick: // streams known before Start: the first reading reads them
	default:
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, b.s.cfg.StoreTimeout)
		b.read(rctx)
		cancel()
		if b.afterRead != nil {
			b.afterRead()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-b.kick:
		}
	}
}

// read asks Redis for the backlog (one pipelined round trip, and one more
// per stream whose lag Redis cannot give) and records every value it got.
func (b *backlogReader) read(ctx context.Context) {
	streams := b.o.known()
	if len(streams) == 0 {
		return
	}
	lens := make(map[string]*redis.IntCmd, 2*len(streams))
	groups := make(map[string]*redis.XInfoGroupsCmd, len(streams))
	_, _ = b.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, st := range streams {
			lens[st] = p.XLen(ctx, st)
			lens[st+DLQSuffix] = p.XLen(ctx, st+DLQSuffix)
			groups[st] = p.XInfoGroups(ctx, st)
		}
		return nil
	})
	for st, cmd := range lens {
		if n, err := cmd.Result(); err == nil {
			b.length.WithLabelValues(st).Set(float64(n))
		}
	}
	for st, cmd := range groups {
		switch lag, state := b.readLag(ctx, st, cmd); state {
		case lagRead:
			b.lag.WithLabelValues(st, b.s.cfg.Group).Set(lag)
		case lagGone:
			b.lag.DeleteLabelValues(st, b.s.cfg.Group)
		}
	}
}

const (
	lagRead    = iota
	lagGone    // the stream or the group is not there: no lag
	lagUnknown // Redis did not give it: the last reading holds
)

// lag computes the group's lag (undelivered plus pending) from XINFO GROUPS.
func (b *backlogReader) readLag(ctx context.Context, st string, cmd *redis.XInfoGroupsCmd) (float64, int) {
	infos, err := cmd.Result()
	switch {
	case err != nil && streamGone(err):
		return 0, lagGone
	case err != nil: // no answer, or BUSY, LOADING…
		return 0, lagUnknown
	}
	for _, g := range infos {
		if g.Name != b.s.cfg.Group {
			continue
		}
		undelivered := g.Lag
		if undelivered < 0 { // Redis cannot give it (an entry deleted after the last delivered one)
			var err error
			if undelivered, err = b.countUndelivered(ctx, st, g.LastDeliveredID); err != nil {
				return 0, lagUnknown
			}
		}
		return float64(undelivered + g.Pending), lagRead
	}
	return 0, lagGone // the group was destroyed
}

// streamGone reports whether err is Redis's answer that the stream is not
// there; any other error says nothing about it.
func streamGone(err error) bool {
	return redis.HasErrorPrefix(err, "no such key") || redis.HasErrorPrefix(err, "WRONGTYPE")
}

// undeliveredCountLimit bounds the counting of a lag Redis cannot give:
// above the StreamConsumerLagCritical threshold (10000).
const undeliveredCountLimit = 10001

// undeliveredPerCall bounds one counting call: Redis serves nothing else meanwhile.
const undeliveredPerCall = 500

// countUndeliveredScript counts up to ARGV[2] entries of KEYS[1] after
// ARGV[1], in pages of 100: {count, id to go on from or ""}; XLEN when the
// group has read nothing still in the stream.
var countUndeliveredScript = redis.NewScript(`
if #redis.call('XRANGE', KEYS[1], '-', ARGV[1], 'COUNT', 1) == 0 then
  return {redis.call('XLEN', KEYS[1]), ''}
end
local limit = tonumber(ARGV[2])
local n, from = 0, ARGV[1]
while n < limit do
  local want = math.min(100, limit - n)
  local page = redis.call('XRANGE', KEYS[1], '(' .. from, '+', 'COUNT', want)
  n = n + #page
  if #page < want then
    return {n, ''}
  end
  from = page[#page][1]
end
return {n, from}
`)

// countUndelivered counts the entries of stream after the group's last
// delivered id, for when Redis answers the lag as NULL (after an XDEL).
func (b *backlogReader) countUndelivered(ctx context.Context, stream, lastDelivered string) (int64, error) {
	var total int64
	from := lastDelivered
	for total < undeliveredCountLimit {
		res, err := countUndeliveredScript.Run(ctx, b.s.rdb, []string{stream}, from, min(undeliveredPerCall, undeliveredCountLimit-total)).Slice()
		if err != nil {
			return 0, err
		}
		if len(res) != 2 {
			return 0, fmt.Errorf("streamfx: count undelivered: unexpected reply %v", res)
		}
		n, _ := res[0].(int64)
		next, _ := res[1].(string)
		total += n
		if next == "" {
			break
		}
		from = next
	}
	return total, nil
}
