package ratelimitfx

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// KeyFunc picks the client a request counts against; ok false: the rule
// does not limit it (no user signed in, for a per-user rule).
type KeyFunc func(r *http.Request) (key string, ok bool)

// ByIP keys by the client's IP address: the connection's address, or, when
// that is a trusted proxy (Config.TrustedProxies), the rightmost address of
// X-Forwarded-For that is not a trusted proxy. An IPv6 client counts as its
// /Config.IPv6Prefix network.
func (l *Limiter) ByIP() KeyFunc {
	return func(r *http.Request) (string, bool) { return "ip:" + l.network(clientIP(r, l.proxies)), true }
}

// network is the budget of client address ip: its IPv6 network, or ip.
func (l *Limiter) network(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is6() {
		return ip
	}
	p, _ := a.Prefix(l.cfg.IPv6Prefix)
	return p.String()
}

// ByHeader keys by a request header (an API key, a tenant id); requests
// without it are not limited by the rule.
func ByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, bool) {
		v := r.Header.Get(name)
		return "h:" + v, v != ""
	}
}

// ByUser keys by the user id userID reads from the request; "" (anonymous)
// is not limited.
func ByUser(userID func(r *http.Request) string) KeyFunc {
	return func(r *http.Request) (string, bool) {
		id := userID(r)
		return "user:" + id, id != ""
	}
}

func clientIP(r *http.Request, trusted []netip.Prefix) string {
	var addr netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		addr = ap.Addr()
	} else if a, err := netip.ParseAddr(r.RemoteAddr); err == nil { // no port (tests, custom servers)
		addr = a
	} else {
		return r.RemoteAddr
	}
	addr = addr.Unmap()
	if !isTrusted(addr, trusted) {
		return addr.String()
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return addr.String() // a malformed hop: stop believing the header
			}
			if a = a.Unmap(); !isTrusted(a, trusted) {
				return a.String()
			}
			addr = a
		}
	}
	return addr.String() // every hop trusted: the leftmost proxy is the client
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a) })
}

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
