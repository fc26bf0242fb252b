package ratelimitfx

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// The client IP never comes from X-Forwarded-For when the peer is not a
// trusted proxy, and is always an address (or the raw peer) — whatever the
// header holds.
func FuzzClientIP(f *testing.F) {
	for _, seed := range []struct{ remote, xff string }{
		{"10.0.0.1:1", "1.2.3.4"}, {"10.0.0.1:1", "1.2.3.4, 10.0.0.2"}, {"203.0.113.1:1", "1.2.3.4"},
		{"[::1]:1", "::ffff:1.2.3.4"}, {"10.0.0.1:1", ",,,"}, {"garbage", "x"},
	} {
		f.Add(seed.remote, seed.xff)
	}
	trusted, _ := parseProxies([]string{"10.0.0.0/8", "::1"})
	f.Fuzz(func(t *testing.T, remote, xff string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = remote
		req.Header.Set("X-Forwarded-For", xff)
		got := clientIP(req, trusted)
		peer, perr := netip.ParseAddrPort(remote)
		if perr != nil {
			return // an unparseable peer is used as it is
		}
		if !isTrusted(peer.Addr().Unmap(), trusted) && got != peer.Addr().Unmap().String() {
			t.Fatalf("untrusted peer %s: client %q taken from X-Forwarded-For %q", remote, got, xff)
		}
		if _, err := netip.ParseAddr(got); err != nil && !strings.Contains(remote, got) {
			t.Fatalf("client %q is neither an address nor the peer", got)
		}
	})
}
