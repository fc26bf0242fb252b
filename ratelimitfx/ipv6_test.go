package ratelimitfx

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// Every IPv6 address had a budget of its own, so a client holding a /64
// (the usual assignment) had 2^64 of them. ByIP keys an IPv6 client by its
// /64 (Config.IPv6Prefix), an IPv4 one by its address.
func TestByIP_IPv6ClientsShareTheirNetworksBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		prefix        int
		first, second string
		shared        bool
	}{
		{0, "[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", true},
		{0, "[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1", false},
		{48, "[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1", true},
		{128, "[2001:db8:1:2::1]:1", "[2001:db8:1:2::2]:1", false},
		{0, "203.0.113.1:1", "203.0.113.2:1", false},
		{0, "[::ffff:203.0.113.1]:1", "203.0.113.1:2", true},
	} {
		l := newLimiter(t, srv, Config{Limit: 1, Window: time.Minute, IPv6Prefix: tc.prefix})
		h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		codes := []int{}
		for _, remote := range []string{tc.first, tc.second} {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = remote
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			codes = append(codes, w.Code)
		}
		want := []int{http.StatusOK, http.StatusOK}
		if tc.shared {
			want[1] = http.StatusTooManyRequests
		}
		if codes[0] != want[0] || codes[1] != want[1] {
			t.Errorf("/%d: %s then %s answered %v, want %v", tc.prefix, tc.first, tc.second, codes, want)
		}
	}
	for _, bad := range []int{-1, 129} {
		if err := (Config{IPv6Prefix: bad}).Validate(); err == nil {
			t.Errorf("IPv6Prefix %d accepted", bad)
		}
	}
}
