package lockfx

import (
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
)

// fenceTTL bounds the memory of unused names' fencing counters; tokens do
// not depend on it.
const fenceTTL = 7 * 24 * time.Hour

// abandonedTTL is how long an owner's marker outlives the lease.
const abandonedTTL = time.Minute

// acquireScript takes the lock for an owner and returns its fencing
// token, or 0 when someone else holds it. KEYS: lock, fencing counter,
// this owner's marker (one slot); ARGV: owner, lease ms, counter ms,
// marker ms.
//
// The token is max(last + 1, Redis TIME in µs): it keeps growing when the
// counter is lost (a restart without persistence, a failover, eviction)
// since the clock moved on; µs stay below 2^53 until 2255. The same owner
// finding the lock its own is a repeated delivery (go-redis retries a
// call whose answer was lost): it gets its token again. An owner's
// marker (left by "held", Release, or a give-up) means its call has had
// its outcome: a late delivery of it takes nothing.
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

// releaseScript deletes the lock if the owner holds it and leaves the
// owner's marker (with pcall: out of memory still releases). KEYS: lock,
// marker; ARGV: owner, marker ms. Returns 1 or 0.
var releaseScript = redis.NewScript(`
redis.pcall('SET', KEYS[2], '1', 'PX', ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// extendScript lengthens the lease if the owner holds it, never
// shortening it, so the holder's validity can only be too short whatever
// order renewals run in. KEYS: lock; ARGV: owner, lease ms. Returns 1 or 0.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
`)

// abandonScript gives up an acquire whose outcome is unknown: it frees
// the lock if that acquire took it and leaves the owner's marker, so that
// a later delivery takes nothing. Out of memory, the marker is refused but
// the lock still freed. Returns 1 when the marker is there, 0 when not
// (the give-back tries again). KEYS: lock, marker; ARGV: owner, marker ms.
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

// ErrEmptyName means Acquire was given the empty lock name, almost always
// a missing id; refused before any Redis call.
var ErrEmptyName = &redisfx.BaseError{Code: "lock_name_empty", Message: "lockfx: the lock name is empty"}

// lockKeys are the Redis keys of one lock name, in one Cluster slot.
type lockKeys struct {
	lock  string // the owner, with the lease as its expiry
	fence string // the last fencing token handed out for the name
}

// abandoned is the key of one owner's marker (see acquireScript).
func (k lockKeys) abandoned(owner string) string { return k.fence + ":abandoned:" + owner }

// keysOf lays out KeyPrefix + "{" + name + "}" and its ":fence" counter,
// sharing the hash tag {name}. A name starting with "}" (its tag would be
// empty, hashing the whole key) gets KeyPrefix + "~{~}" + name + "}",
// which no other name's key can equal.
func (l *Locker) keysOf(name string) (lockKeys, error) {
	if name == "" {
		return lockKeys{}, ErrEmptyName
	}
	tag := "{"
	if name[0] == '}' {
		tag = "~{~}"
	}
	lock := l.cfg.KeyPrefix + tag + name + "}"
	return lockKeys{lock: lock, fence: lock + ":fence"}, nil
}

func emptyHashTag(prefix string) bool {
	_, tag, ok := strings.Cut(prefix, "{")
	return ok && strings.HasPrefix(tag, "}")
}
