package idempotencyfx

import (
	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/clientcheck"
)

// checkClient refuses a Redis client that cannot honour StoreTimeout: nil,
// or a go-redis client without ContextTimeoutEnabled (go-redis then
// ignores context deadlines, and a paused or stalled Redis holds a request
// for the client's ReadTimeout instead of StoreTimeout). The check is the
// one every plugin's New makes.
func checkClient(rdb redis.UniversalClient) error {
	return clientcheck.HonoursDeadlines("idempotencyfx", "Config.StoreTimeout", rdb)
}
