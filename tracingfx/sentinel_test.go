package tracingfx

import (
	"context"
	"testing"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// A Sentinel client's spans name the master the commands went to, not the
// Sentinel it asked.
func TestCommandSpans_SentinelSpansNameTheMaster(t *testing.T) {
	t.Parallel()
	master := redistest.StartPrivate(t)
	sentinel := redistest.StartSentinel(t, master.Addr())
	m := newMemory(t)
	c, err := storefx.New("default", storefx.Config{Addrs: []string{sentinel}, MasterName: "mymaster"}, Instrumentation(m, SpanConfig{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	a := attrsOf(m.one(t, "redis.PING"))
	if a["server.address"].AsString() != "127.0.0.1" || a["server.port"].AsInt64() != portOf(t, master.Addr()) {
		t.Fatalf("span names %s:%d; the master is %s, the sentinel %s", a["server.address"].AsString(), a["server.port"].AsInt64(), master.Addr(), sentinel)
	}
}
