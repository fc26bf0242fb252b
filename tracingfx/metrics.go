package tracingfx

import (
	"cmp"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisfx/redisfx/internal/readmostly"
)

// CommandMetrics are the Redis command metrics, measured in the same hook
// as the command spans (one clock reading for both).
type CommandMetrics struct {
	commands *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   prometheus.Counter
	// children are each command label's counter and histogram, made on
	// first use (labels are a fixed set: no series for unused commands).
	children readmostly.Map[string, commandChildren]
}

type commandChildren struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

func (m *CommandMetrics) newChildren(label string) commandChildren {
	return commandChildren{count: m.commands.WithLabelValues(label), duration: m.duration.WithLabelValues(label)}
}

// NewCommandMetrics registers commands_total{command},
// command_duration_seconds{command} and errors_total with reg. Pass the
// result to Instrumentation; nil there means no command metrics.
func NewCommandMetrics(reg prometheus.Registerer) (*CommandMetrics, error) {
	if reg == nil {
		return nil, errors.New("tracingfx: NewCommandMetrics needs a prometheus.Registerer")
	}
	m := &CommandMetrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "commands_total",
			Help: "Redis commands executed, by command name."}, []string{"command"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "command_duration_seconds",
			Help:    "Redis command latency, by command name.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}, []string{"command"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "errors_total",
			Help: "Redis commands that failed (redis.Nil and a Cluster redirect are not failures)."}),
	}
	for _, c := range []prometheus.Collector{m.commands, m.duration, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (h *commandHook) measure(name string, took time.Duration, failed bool) {
	if h.metrics == nil {
		return
	}
	cc := h.metrics.children.LoadOrCreate(cmp.Or(knownCommands[name].operation, "OTHER"), h.metrics.newChildren)
	cc.count.Inc()
	cc.duration.Observe(took.Seconds())
	if failed {
		h.metrics.errors.Inc()
	}
}
