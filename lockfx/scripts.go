package lockfx

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// fenceTTL is how long a name's fencing counter outlives its last
// acquisition. Tokens do not depend on it (see acquireScript); it only
// bounds the memory of names no longer used.
const fenceTTL = 7 * 24 * time.Hour

// abandonedTTL is how long an owner's marker outlives the lease: an
// acquire script delivered later than that (a connection stalled for
// minutes) could still take the lock for one TTL.
const abandonedTTL = time.Minute

// acquireScript takes the lock for an owner and hands out its fencing
// token, or returns 0 when someone else holds it.
//
// KEYS[1] lock, KEYS[2] fencing counter, KEYS[3] this owner's marker (all
// in one slot); ARGV[1] owner, ARGV[2] lease ms, ARGV[3] counter lifetime
// ms, ARGV[4] marker lifetime ms.
//
// The token is max(last token + 1, Redis TIME in microseconds): it grows
// with every acquisition while the counter lives, and keeps growing when
// the counter is lost (a restart without persistence, a failover to a
// replica that lagged, eviction) because the clock has moved on since the
// last token was handed out. Microseconds since 1970 stay below 2^53 (Lua
// numbers are doubles) until the year 2255.
//
// The same owner finding the lock already its own is a repeated delivery
// of its own acquire (a retry after a lost reply): it gets the token it
// was given. An owner's marker means its call has had its outcome (or the
// caller stopped waiting for it): a repeated delivery of it, however late,
// must not take the lock. The marker is left by the answer "held" (the
// caller takes that answer and tries again, if at all, as a new owner),
// by Release, and by a give-up (abandonScript). go-redis may send one
// call twice (it retries a call whose answer did not come in its
// ReadTimeout, on another connection), and the first send may reach Redis
// after the second's answer was taken.
var acquireScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
local granted = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not granted and redis.call('GET', KEYS[1]) ~= ARGV[1] then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[4])
  return 0
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if not granted then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2]) -- never shorter than an Extend made it
  end
  if last > 0 then
    return last
  end
end
local t = redis.call('TIME')
local token = math.max(last + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[2], string.format('%.0f', token), 'PX', ARGV[3])
return token
`)

// releaseScript deletes the lock only if the owner still holds it, and
// leaves the owner's marker, so that a repeated delivery of its acquire
// arriving later does not take the lock again (see acquireScript). The
// marker is written with pcall: a Redis out of memory still releases.
// KEYS[1] lock, KEYS[2] the owner's marker; ARGV[1] owner, ARGV[2] marker
// ms. Returns 1 or 0.
var releaseScript = redis.NewScript(`
redis.pcall('SET', KEYS[2], '1', 'PX', ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// extendScript lengthens the lease only if the owner still holds it, and
// never shortens it: the holder's view of its validity can then only be
// too short, never too long, whatever order concurrent renewals run in.
// KEYS[1] lock; ARGV[1] owner, ARGV[2] lease ms. Returns 1 or 0.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
`)

// abandonScript gives up an acquire whose outcome the caller did not
// learn: it frees the lock if that acquire took it, and leaves the owner's
// marker, which stops it from taking it should it arrive later (commands
// on different connections may run in any order). The marker is written
// with pcall: a Redis out of memory refuses it but still frees the lock
// (DEL is allowed), so that the lock is not held for the whole time memory
// lasts out. Returns 1 when the marker is there (written now, or by an
// earlier try whose answer was lost), 0 when it was refused and is not:
// the give-back then tries again until it is (giveBack), since the
// acquire, delivered once memory is freed, could take the lock.
// KEYS[1] lock, KEYS[2] give-up marker; ARGV[1] owner, ARGV[2] marker ms.
var abandonScript = redis.NewScript(`
local marked = redis.pcall('SET', KEYS[2], '1', 'PX', ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
if type(marked) == 'table' and marked.err and redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
return 1
`)
