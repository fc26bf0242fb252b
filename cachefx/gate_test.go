package cachefx

import (
	"context"
	"net"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// gate is a go-redis hook that holds the first call (a command or a
// pipeline) it matches once armed, so a test can put another operation
// exactly inside a window of the code under test. With after set it holds
// the call once Redis has answered it, else before it is sent. With fail
// set it fails the call instead, without sending it.
type gate struct {
	match   func(cmds []redis.Cmder) bool
	after   bool
	fail    error
	armed   atomic.Bool
	reached chan struct{} // closed when the held call arrives
	release chan struct{} // close to let it go
}

func newGate(after bool, match func([]redis.Cmder) bool) *gate {
	return &gate{match: match, after: after, reached: make(chan struct{}), release: make(chan struct{})}
}

// commandIs matches a call that contains the command name (lower case),
// with args containing each of with.
func commandIs(name string, with ...string) func([]redis.Cmder) bool {
	return func(cmds []redis.Cmder) bool {
		for _, c := range cmds {
			if c.Name() != name {
				continue
			}
			args := strings.ToLower(fmtArgs(c.Args()))
			all := true
			for _, w := range with {
				all = all && strings.Contains(args, strings.ToLower(w))
			}
			if all {
				return true
			}
		}
		return false
	}
}

func fmtArgs(args []any) string {
	var b strings.Builder
	for _, a := range args {
		switch v := a.(type) {
		case string:
			b.WriteString(v)
		case []byte:
			b.Write(v)
		}
		b.WriteByte(' ')
	}
	return b.String()
}

func (g *gate) hold(cmds []redis.Cmder, call func() error) error {
	if !g.match(cmds) || !g.armed.CompareAndSwap(true, false) {
		return call()
	}
	if g.fail != nil {
		for _, c := range cmds {
			c.SetErr(g.fail)
		}
		return g.fail
	}
	if !g.after {
		close(g.reached)
		<-g.release
		return call()
	}
	err := call()
	close(g.reached)
	<-g.release
	return err
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return g.hold([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return g.hold(cmds, func() error { return next(ctx, cmds) })
	}
}
