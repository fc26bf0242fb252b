package ratelimitfx

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redisfx/redisfx/internal/fxconfig"
)

// counterKey is the Redis key of one client's counter under one rule.
//
// It names everything that makes two rules distinct — the algorithm, the
// limit, the window and the rule's name — so that distinct rules never
// share a counter (a 3-per-second rule sharing a 100-per-hour rule's
// counter counts every request twice and inherits the hour's expiry),
// while the same rule shares its counter across every process:
//
//	ratelimit:fixed-window:100-per-60000ms:"GET /orders":ip:203.0.113.7
//
// The name is quoted, so a name that contains ':' cannot run into the
// client's key, and its braces are escaped, so that a route pattern's
// "{id}" is not a Cluster hash tag putting every client of the route on
// one slot. The client's key comes last, whole.
func (l *Limiter) counterKey(rule Rule, key string) string {
	var b strings.Builder
	b.Grow(len(l.cfg.KeyPrefix) + len(l.cfg.Algorithm) + len(rule.Name) + len(key) + 40)
	b.WriteString(l.cfg.KeyPrefix)
	b.WriteString(string(l.cfg.Algorithm))
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(rule.Limit, 10))
	b.WriteString("-per-")
	b.WriteString(strconv.FormatInt(windowMS(rule.Window), 10))
	b.WriteString("ms:")
	b.WriteString(braceEscaper.Replace(strconv.Quote(rule.Name)))
	b.WriteByte(':')
	b.WriteString(key)
	return b.String()
}

// braceEscaper writes braces the way strconv.Quote writes other bytes it
// escapes; a quoted string has no other backslash-x sequence that could be
// mistaken for them, since Quote doubles every backslash.
var braceEscaper = strings.NewReplacer("{", `\x7b`, "}", `\x7d`)

// windowMS is a window in Redis's unit, whole milliseconds: Config and
// Rule windows are refused unless windowInvalid passes them, so nothing is
// truncated.
func windowMS(w time.Duration) int64 { return w.Milliseconds() }

// windowInvalid says why w cannot be a window, or "" when it can. A window
// is whole milliseconds, at least one: the counter's name and Redis hold it
// in milliseconds, so windows that differ below one would share a counter.
// It is at most fxconfig.MaxDuration: a Decision's Reset (the window plus
// its start, minus Redis's clock) overflowed for a window near the largest
// Duration as soon as a counter's window began after Redis's clock (a
// failover to a node whose clock is behind), coming out as -292 years.
func windowInvalid(w time.Duration) string {
	if w < time.Millisecond || w%time.Millisecond != 0 {
		return fmt.Sprintf("%v is not a whole number of milliseconds (at least 1ms)", w)
	}
	return fxconfig.TooLong(w)
}
