package ratelimitfx

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The RateLimit fields follow draft-ietf-httpapi-ratelimit-headers-11
// (see docs/rate-limit.md), without the partition key.

// policy is one rule's item name and its RateLimit-Policy item.
type policy struct {
	name string // an sf-string, quoted
	item string // "name";q=…;w=…
}

func newPolicy(rule Rule, named bool) policy {
	name := rule.Name
	if !named {
		// told apart from the route's other rules by what it allows: "100-per-1h"
		name = strconv.FormatInt(rule.Limit, 10) + "-per-" + shortDuration(rule.Window)
	}
	quoted := sfString(name)
	return policy{name: quoted, item: quoted + ";q=" + strconv.FormatInt(rule.Limit, 10) + ";w=" + strconv.FormatInt(ceilSeconds(rule.Window), 10)}
}

// setHeaders adds the rule's items to the RateLimit-Policy and RateLimit
// Lists (each rule of a route adds its own) and, with LegacyHeaders, sets
// draft-06's three fields for the last rule checked.
func (l *Limiter) setHeaders(h http.Header, p policy, d Decision) {
	reset := strconv.FormatInt(ceilSeconds(d.Reset), 10)
	appendList(h, "RateLimit-Policy", p.item)
	appendList(h, "RateLimit", p.name+";r="+strconv.FormatInt(d.Remaining, 10)+";t="+reset)
	if l.cfg.LegacyHeaders {
		h.Set("RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
		h.Set("RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
		h.Set("RateLimit-Reset", reset)
	}
}

// appendList adds item to the List field name, on one line.
func appendList(h http.Header, name, item string) {
	if v := h.Get(name); v != "" {
		item = v + ", " + item
	}
	h.Set(name, item)
}

// sfString quotes s as a structured-field String; bytes it cannot hold
// become '_'.
func sfString(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '_'
		}
	}
	return `"` + sfEscaper.Replace(string(b)) + `"`
}

var sfEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// ceilSeconds is d in whole seconds, rounded up (float64 is exact enough
// for whole milliseconds up to the largest Duration).
func ceilSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// shortDuration writes a window in its largest whole unit: 1h, 90s, 1500ms.
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		sym  string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.sym
		}
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}
