package httpfx

import "testing"

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
