package ratelimitfx

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// counterKey is the Redis key of one client's counter under one rule
// (docs/rate-limit.md, "Keys and rules"): distinct rules never share a
// counter. The name is quoted (a ':' in it cannot run into the key) with
// its braces escaped (a route's "{id}" is not a Cluster hash tag).
func (l *Limiter) counterKey(rule Rule, key string) string {
	return l.cfg.KeyPrefix + string(l.cfg.Algorithm) + ":" + strconv.FormatInt(rule.Limit, 10) + "-per-" +
		strconv.FormatInt(rule.Window.Milliseconds(), 10) + "ms:" + braceEscaper.Replace(strconv.Quote(rule.Name)) + ":" + key
}

// braceEscaper writes braces as strconv.Quote writes other escaped bytes.
var braceEscaper = strings.NewReplacer("{", `\x7b`, "}", `\x7d`)

// windowInvalid says why w cannot be a window, or "" when it can: whole
// milliseconds, at least one (windows differing below that would share a
// counter).
func windowInvalid(w time.Duration) string {
	if w < time.Millisecond || w%time.Millisecond != 0 {
		return fmt.Sprintf("%v is not a whole number of milliseconds (at least 1ms)", w)
	}
	return ""
}
