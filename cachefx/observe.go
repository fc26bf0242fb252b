package cachefx

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisfx/redisfx/internal/plugin"
	"github.com/redisfx/redisfx/plugintrace"
)

// Option adds an optional collaborator to New.
type Option = plugin.Option

// WithRegisterer registers the cache metrics with reg. A nil reg registers nothing.
func WithRegisterer(reg prometheus.Registerer) Option { return plugin.WithRegisterer(reg) }

// WithTracerProvider opens the cache spans with tp (tracingfx's plugin
// tracer: a no-op unless PluginTracing is on).
func WithTracerProvider(tp trace.TracerProvider) Option { return plugin.WithTracerProvider(tp) }

// Attribute names of the cache spans. Tags carry no prefix, as the tracing
// spec names them.
const (
	AttrNamespace = "redisfx.cache.namespace"
	AttrKey       = "redisfx.cache.key"
	AttrHit       = "redisfx.cache.hit"
	AttrLayer     = "redisfx.cache.layer"
	AttrTags      = "tags"
)

// Layers, the values of the layer label and of redisfx.cache.layer.
const (
	LayerLocal = "local"
	LayerRedis = "redis"
)

// observer measures and traces cache operations.
type observer struct {
	tracer            trace.TracerProvider
	keys              plugintrace.KeyAttribute
	hits              map[string]prometheus.Counter // by layer
	misses, stampedes prometheus.Counter
}

func newObserver(reg prometheus.Registerer, tp trace.TracerProvider, keys plugintrace.KeyAttribute, local *localLayer) (*observer, error) {
	hits := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cache_hits_total", Help: "Cache reads answered, by the layer that answered."}, []string{"layer"})
	o := &observer{tracer: tp, keys: keys,
		hits:      map[string]prometheus.Counter{LayerRedis: hits.WithLabelValues(LayerRedis)}, // series exist from the start: rates are defined at once
		misses:    prometheus.NewCounter(prometheus.CounterOpts{Name: "cache_misses_total", Help: "Cache reads that found nothing in any layer."}),
		stampedes: prometheus.NewCounter(prometheus.CounterOpts{Name: "cache_stampede_prevented_total", Help: "GetOrLoad calls that waited for a load already running (here or in another process) instead of loading again."}),
	}
	cs := []prometheus.Collector{hits, o.misses, o.stampedes}
	if local != nil {
		o.hits[LayerLocal] = hits.WithLabelValues(LayerLocal)
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cache_size", Help: "Entries held by a cache layer.", ConstLabels: prometheus.Labels{"layer": LayerLocal}},
			func() float64 { return float64(local.len()) }))
	}
	return o, plugin.Register(reg, cs...)
}

// start opens a span of namespace ns with redisfx.cache.key set to keys
// as Config.KeyAttribute writes them (none: no key attribute).
func (o *observer) start(ctx context.Context, name, op, ns string, keys ...string) (context.Context, *plugintrace.Span) {
	ctx, span := plugintrace.Start(ctx, o.tracer, "cache", name, op, attribute.String(AttrNamespace, ns))
	if len(keys) > 0 {
		span.SetKey(AttrKey, o.keys, keys...)
	}
	return ctx, span
}

// tags sets the tags attribute, each tag written as a key is.
func (o *observer) tags(span *plugintrace.Span, tags []string) {
	if span.IsRecording() {
		span.SetAttributes(attribute.StringSlice(AttrTags, o.keys.Values(tags)))
	}
}

func (o *observer) hit(span *plugintrace.Span, layer string) {
	o.hits[layer].Inc()
	span.SetAttributes(attribute.Bool(AttrHit, true), attribute.String(AttrLayer, layer))
	span.AddEvent("cache.hit")
}

func (o *observer) miss(span *plugintrace.Span) {
	o.misses.Inc()
	span.SetAttributes(attribute.Bool(AttrHit, false))
	span.AddEvent("cache.miss")
}
