package cachefx

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// scriptCall is one run of a script inside a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// queueAll adds each call to p as an EVALSHA.
func queueAll(ctx context.Context, p redis.Pipeliner, calls []*scriptCall) {
	for _, sc := range calls {
		sc.cmd = sc.script.EvalSha(ctx, p, sc.keys, sc.args...)
	}
}

// retryNoScript runs again, with the script's body, the calls that a
// server answered NOSCRIPT (it lost its script cache: a restart, a
// failover, SCRIPT FLUSH). Only those: on a Cluster the other masters have
// already run theirs, and running a call twice is not always harmless.
func retryNoScript(ctx context.Context, rdb redis.Cmdable, calls []*scriptCall) {
	var again []*scriptCall
	for _, sc := range calls {
		if sc.cmd != nil && redis.HasErrorPrefix(sc.cmd.Err(), "NOSCRIPT") {
			again = append(again, sc)
		}
	}
	if len(again) == 0 {
		return
	}
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sc := range again {
			sc.cmd = sc.script.Eval(ctx, p, sc.keys, sc.args...)
		}
		return nil
	})
}

// firstError is the first failure among calls (a call never queued, nil).
func firstError(calls []*scriptCall) error {
	for _, sc := range calls {
		if sc.cmd == nil {
			continue
		}
		if err := sc.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}
