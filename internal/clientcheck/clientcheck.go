// Package clientcheck refuses, at construction, a Redis client a module
// cannot bound in time.
package clientcheck

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// HonoursDeadlines returns an error, prefixed with pkg, when rdb is nil or
// is a go-redis client without ContextTimeoutEnabled (off by default), which
// would let a stalled Redis hold a call past timeout ("Config.StoreTimeout").
// A client of another type must honour context deadlines itself.
func HonoursDeadlines(pkg, timeout string, rdb redis.UniversalClient) error {
	if rdb == nil {
		return fmt.Errorf("%s: New needs a Redis client", pkg)
	}
	if w, ok := rdb.(interface{ Unwrap() redis.UniversalClient }); ok { // a storefx.Client
		rdb = w.Unwrap()
	}
	var honours bool
	switch c := rdb.(type) {
	case *redis.Client:
		honours = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		honours = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		honours = c.Options().ContextTimeoutEnabled
	default:
		return nil
	}
	if !honours {
		return fmt.Errorf("%s: the %T ignores context deadlines, so %s could not bound a Redis call "+
			"(a paused Redis would hold callers for the client's ReadTimeout): set ContextTimeoutEnabled: true "+
			"in its options, or build it with storefx.New, which does", pkg, rdb, timeout)
	}
	return nil
}
