package httpfx

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// joinedPattern takes a shortcut for the common one-router pattern: it
// must give what chi's RoutePattern gives for every list of patterns, the
// mount points' "/*" included.
func TestJoinedPattern_AsChi(t *testing.T) {
	lists := [][]string{
		{"/"}, {"/payments"}, {"/payments/"}, {"/payments//"}, {"/payments/{id}"}, {"/*"}, {"/files/*"},
		{"/a/*/b"}, {"/a/*/*/b"}, {"/*/"}, {"//"}, {"/a/*", "/b"}, {"/api/*", "/payments/{id}"},
		{"/api/*", "/"}, {"/api/*", "/v1/*", "/x/"}, {""}, {"/a*/b"}, {"/a/*b/c"}, {"*/"},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{"/", "*", "/*", "/*/", "a", "{id}", "//", "/b/"}
	for range 5000 {
		list := make([]string, 1+rng.IntN(3))
		for i := range list {
			var b strings.Builder
			for range rng.IntN(5) {
				b.WriteString(parts[rng.IntN(len(parts))])
			}
			list[i] = b.String()
		}
		lists = append(lists, list)
	}
	for _, list := range lists {
		rc := chi.NewRouteContext()
		rc.RoutePatterns = list
		if got, want := joinedPattern(rc), rc.RoutePattern(); got != want {
			t.Fatalf("patterns %q: %q, chi says %q", list, got, want)
		}
	}
}

func TestProtocolVersion(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		want         string
	}{{1, 1, "1.1"}, {1, 0, "1.0"}, {2, 0, "2"}, {3, 0, "3"}, {1, 2, "1.2"}, {4, 1, "4"}} {
		if got := protocolVersion(c.major, c.minor); got != c.want {
			t.Errorf("HTTP/%d.%d: %q, want %q", c.major, c.minor, got, c.want)
		}
	}
}
