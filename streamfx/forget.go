package streamfx

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// forgetScript removes from a group every consumer other than the caller
// that holds no pending message and has not touched the group for ARGV[2]
// ms. Check and deletion are one script, so a consumer that reads a message
// in between cannot have it dropped; a live consumer deleted anyway is
// recreated by its next read.
// KEYS[1] stream; ARGV group, idle ms, caller.
var forgetScript = redis.NewScript(`
local removed = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[3] and tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    removed = removed + 1
  end
end
return removed
`)

// forgetDeadConsumers runs forgetScript at most every ForgetConsumersAfter/10.
func (c *consumer) forgetDeadConsumers(last *time.Time) {
	cfg := c.s.cfg
	if time.Since(*last) < cfg.ForgetConsumersAfter/10 {
		return
	}
	*last = time.Now()
	ctx, cancel := c.storeCtx()
	defer cancel()
	_ = forgetScript.Run(ctx, c.s.rdb, []string{c.stream}, cfg.Group, cfg.ForgetConsumersAfter.Milliseconds(), cfg.Consumer).Err()
}
