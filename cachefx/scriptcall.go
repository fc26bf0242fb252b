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

func queueAll(ctx context.Context, p redis.Pipeliner, calls []*scriptCall) {
	for _, sc := range calls {
		sc.cmd = sc.script.EvalSha(ctx, p, sc.keys, sc.args...)
	}
}

// runCalls runs calls in one pipeline, then retryNoScript; it returns the
// first failure.
func runCalls(ctx context.Context, rdb redis.Cmdable, calls ...*scriptCall) error {
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error { queueAll(ctx, p, calls); return nil })
	retryNoScript(ctx, rdb, calls)
	return firstError(calls)
}

func firstError(calls []*scriptCall) error {
	for _, sc := range calls {
		if err := sc.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// retryNoScript runs again, with the script's body, the calls that a
// server answered NOSCRIPT (it lost its script cache: a restart, a
// failover, SCRIPT FLUSH). Only those: on a Cluster the other masters have
// already run theirs, and running a call twice is not always harmless.
func retryNoScript(ctx context.Context, rdb redis.Cmdable, calls []*scriptCall) {
	var again []*scriptCall
	for _, sc := range calls {
		if redis.HasErrorPrefix(sc.cmd.Err(), "NOSCRIPT") {
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
