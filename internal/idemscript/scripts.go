// Package idemscript holds the Lua scripts of the idempotency record, shared
// by idempotencyfx and the benchmarks' store-path limit server.
package idemscript

import "github.com/redis/go-redis/v9"

// The record is a Redis hash (docs/idempotency.md, "The record in Redis"):
// an in-progress key expires at twice the lease, so it can be taken over.

// Claim is the claim script. KEYS[1] record; ARGV fingerprint, owner, lease ms, wait (0|1).
// Replies: {"n", token} new owner; {"t", token} takeover of an expired
// lease; {"c", response} completed; {"p", lease ms left, owner} in progress
// (the owner token of the attempt that runs, which its completion message
// names); {"f", ttl ms} failed; {"u", ttl ms} not replayable; {"m"}
// fingerprint mismatch; {"x"} this owner's claim was withdrawn (see
// Abandon) and takes nothing.
var Claim = redis.NewScript(`
local k = KEYS[1]
local rec = redis.call('HMGET', k, 's', 'f', 'r', 'm')
local s = rec[1]
-- Numbers go to Redis as %d strings: a Lua number it formats as a float (%.17g), slowly.
if not s then
  if rec[4] and redis.call('HEXISTS', k, 'x:' .. ARGV[2]) == 1 then
    return {'x'}
  end
  local t = redis.call('TIME')
  local n = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  local lease = tonumber(ARGV[3])
  redis.call('HSET', k, 's', 'p', 'f', ARGV[1], 'o', ARGV[2], 'l', string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000) + lease), 'n', n)
  redis.call('PEXPIRE', k, string.format('%d', 2 * lease))
  return {'n', tonumber(n)}
end
if rec[2] ~= ARGV[1] then
  return {'m'}
end
if s == 'c' then
  return {'c', rec[3]}
end
if s == 'p' then
  -- The lease's fields and TIME only here: a replay reads what it answers.
  local l, n, o = unpack(redis.call('HMGET', k, 'l', 'n', 'o'))
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local lease = tonumber(ARGV[3])
  if o == ARGV[2] then
    -- This very claim, delivered again: the client re-sent it after
    -- losing the reply (go-redis retries a command whose connection
    -- failed). The record is this owner's: granted again, not seen as
    -- another's run (which no one would run).
    redis.call('HSET', k, 'l', string.format('%d', now + lease))
    redis.call('PEXPIRE', k, string.format('%d', 2 * lease))
    return {'n', tonumber(n)}
  end
  local left = tonumber(l) - now
  if left <= 0 then
    if rec[4] and redis.call('HEXISTS', k, 'x:' .. ARGV[2]) == 1 then
      return {'x'}
    end
    n = string.format('%d', math.max((tonumber(n) or 0) + 1, t[1] * 1000000 + t[2]))
    redis.call('HSET', k, 'n', n, 'o', ARGV[2], 'l', string.format('%d', now + lease))
    redis.call('PEXPIRE', k, string.format('%d', 2 * lease))
    return {'t', tonumber(n)}
  end
  if ARGV[4] == '1' then
    redis.call('HSET', k, 'w', '1')
  end
  return {'p', left, o}
end
return {s, redis.call('PTTL', k)}
`)

// Renew is the lease renewal script. KEYS[1] record; ARGV owner, lease ms. Extends the lease of a
// living owner. Replies 1, or 0 when the caller is no longer the owner.
var Renew = redis.NewScript(`
local k = KEYS[1]
local rec = redis.call('HMGET', k, 's', 'o')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', k, 'l', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', k, 2 * tonumber(ARGV[2]))
return 1
`)

// appendEvents is the Lua of Complete and Deliver that appends events:
// streamsOK(from, to) says whether KEYS[from…to] are streams or free, and
// append(first, keys, ids) appends the events of ARGV[first…]: MaxLen and
// the retention in ms ('0': none), the number of streams and their names
// (KEYS[keys + 1…]), then per event the number of its stream (KEYS[keys +
// number]), its field count and its fields. It adds their ids to ids, which
// it returns.
const appendEvents = `
local function streamsOK(from, to)
  for i = from, to do
    local t = redis.call('TYPE', KEYS[i])['ok']
    if t ~= 'none' and t ~= 'stream' then
      return false
    end
  end
  return true
end
local function append(first, keys, ids)
  local i, last = first + 3 + tonumber(ARGV[first + 2]), #ARGV
  while i <= last do
    local key, to = KEYS[keys + tonumber(ARGV[i])], i + 1 + tonumber(ARGV[i + 1])
    if ARGV[first] ~= '0' then
      ids[#ids + 1] = redis.call('XADD', key, 'MAXLEN', '~', ARGV[first], '*', unpack(ARGV, i + 2, to))
    else
      ids[#ids + 1] = redis.call('XADD', key, '*', unpack(ARGV, i + 2, to))
    end
    i = to + 1
  end
  if ARGV[first + 1] ~= '0' then
    for j = keys + 1, keys + tonumber(ARGV[first + 2]) do
      redis.call('PEXPIRE', KEYS[j], ARGV[first + 1])
    end
  end
  return ids
end
`

// Complete is the outcome script. KEYS[1] record; ARGV owner, state
// (c|f|u), response, ttl ms (0: no expiry). Writes the outcome only if the
// caller still owns the record (else 0); the owner stays, so a completion
// retried after its reply was lost is recognised (1). When a duplicate is
// waiting, it PUBLISHes on the record key's channel: state, 'o', the owner
// token's length in decimal, ':', the owner token, then the response; a
// failed PUBLISH replies 2.
//
// With events, KEYS[2] is the outbox index and KEYS[3…] the streams if
// they may be written here; ARGV goes on with '1' to have the ids replied
// ('0': not), then the events as append reads them. They are committed
// with the outcome or not at all: appended to the streams when those are
// given and are streams (or free), the reply then {n, ids…} (n without
// them); else ARGV[6…] is written in the record's field 'e' (each
// argument as <length>:<bytes>) and the record into the index, scored by
// Redis's time in ms, for the relay, the reply then {n}. A retry that finds
// the outcome recorded replies 1 whatever became of the events.
var Complete = redis.NewScript(appendEvents + `
local k = KEYS[1]
local rec = redis.call('HMGET', k, 'o', 'w', 's')
if rec[1] ~= ARGV[1] then
  return 0
end
if rec[3] ~= 'p' then
  return 1
end
redis.call('HSET', k, 's', ARGV[2], 'r', ARGV[3])
redis.call('HDEL', k, 'l', 'w')
if ARGV[4] ~= '0' then
  redis.call('PEXPIRE', k, ARGV[4])
else
  redis.call('PERSIST', k)
end
local ids
if ARGV[5] then
  ids = {0} -- n, then the ids; none appended: {n} tells the caller the relay has them
  if #KEYS > 2 and streamsOK(3, #KEYS) then
    append(6, 2, ids)
    if ARGV[5] == '0' then
      ids = nil
    end
  else
    local e = {}
    for i = 6, #ARGV do
      e[#e + 1] = #ARGV[i] .. ':' .. ARGV[i]
    end
    redis.call('HSET', k, 'e', table.concat(e))
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000), k)
    if ARGV[4] ~= '0' then
      redis.call('PEXPIRE', KEYS[2], ARGV[4]) -- its records expire by then
    end
  end
end
local n = 1
if rec[2] then
  local ok = redis.pcall('PUBLISH', k, ARGV[2] .. 'o' .. #ARGV[1] .. ':' .. ARGV[1] .. ARGV[3])
  if type(ok) == 'table' and ok.err then
    n = 2
  end
end
if ids then
  ids[1] = n
  return ids
end
return n
`)

// Deliver appends a record's events to one stream, once. KEYS[1] stream,
// KEYS[2] delivery marker (the stream's slot); ARGV marker ttl ms, then
// the events as append reads them (one stream). Replies the appended
// entries' ids, or 0 when the marker says an earlier call appended them.
// Both write, so that a WAIT after either covers the append. What can fail
// fails before the first write (a script is not undone): a key of another
// type is refused, and Redis refuses only a script's first write for want
// of memory.
var Deliver = redis.NewScript(appendEvents + `
if not streamsOK(1, 1) then
  return redis.error_reply('WRONGTYPE the stream key holds another type')
end
if not redis.call('SET', KEYS[2], 1, 'NX', 'PX', ARGV[1]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
  return 0
end
return append(2, 0, {})
`)

// Delivered ends a record's outbox entry. KEYS[1] record, KEYS[2] outbox
// index; ARGV fencing token. Deletes the events if they are that
// execution's, and the index entry once the record holds none.
var Delivered = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 'n', 'e')
if rec[2] and rec[1] == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'e')
  rec[2] = false
end
if not rec[2] then
  redis.call('ZREM', KEYS[2], KEYS[1])
end
return 1
`)

// All lists every script, for preloading (SCRIPT LOAD) at start.
var All = []*redis.Script{Claim, Renew, Complete, Abandon, Deliver, Delivered}

// Abandon withdraws a claim whose reply was lost, which Redis may have run
// or may still run. If it landed, the record's fields are deleted and its
// waiters woken to claim anew (a message they do not take: they ask their
// record). Either way a marker field x:<owner> is left, and m, which tells
// Claim to look for markers, so that the claim, should it arrive, takes
// nothing; a key made only for the marker expires after ARGV[2] ms.
// KEYS[1] record; ARGV owner, marker ms. Returns 1 (withdrawn) or 0 (marked).
var Abandon = redis.NewScript(`
local k = KEYS[1]
local rec = redis.call('HMGET', k, 's', 'o', 'w')
if rec[1] == 'p' and rec[2] == ARGV[1] then
  -- Other owners' markers in the key stay. Another send of this claim
  -- (go-redis re-sends one whose connection failed) may still come.
  redis.call('HDEL', k, 's', 'f', 'o', 'l', 'n', 'w', 'r')
  redis.call('HSET', k, 'm', '1', 'x:' .. ARGV[1], '1')
  if redis.call('PTTL', k) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', k, ARGV[2])
  end
  if rec[3] then
    redis.pcall('PUBLISH', k, 'xo' .. #ARGV[1] .. ':' .. ARGV[1])
  end
  return 1
end
redis.call('HSET', k, 'm', '1', 'x:' .. ARGV[1], '1')
if not rec[1] and redis.call('PTTL', k) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', k, ARGV[2])
end
return 0
`)
