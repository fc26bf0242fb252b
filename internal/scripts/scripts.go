// Package scripts preloads the plugins' Lua scripts, so that their first
// use is an EVALSHA that succeeds rather than a NOSCRIPT error (counted in
// errors_total) followed by an EVAL.
package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/plugintrace"
)

// Preload loads each script (on every master of a Cluster). A failure is
// not fatal (go-redis falls back to EVAL): the error is for the caller to
// log. A start is not a trace, so SCRIPT LOAD makes no span.
func Preload(ctx context.Context, rdb redis.Scripter, all ...*redis.Script) error {
	ctx = plugintrace.WithoutCommandSpans(ctx)
	for _, s := range all {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}
