package tracingfx

import "strings"

// commandName is how a command is named on its span: the operation
// (db.operation.name: GET, SCRIPT LOAD) and the span name (redis.GET).
type commandName struct{ operation, span string }

// containers are commands whose first argument is a subcommand that names
// the operation: a preload is SCRIPT LOAD, not SCRIPT.
var containers = map[string]bool{
	"acl": true, "client": true, "cluster": true, "command": true, "config": true, "function": true,
	"latency": true, "memory": true, "module": true, "object": true, "pubsub": true, "script": true,
	"slowlog": true, "xgroup": true, "xinfo": true,
}

func commandNames(name string, args []any) commandName {
	if containers[name] && len(args) > 1 {
		if sub, ok := args[1].(string); ok && sub != "" {
			op := strings.ToUpper(name + " " + sub)
			return commandName{op, "redis." + op}
		}
	}
	if n, ok := knownCommands[name]; ok {
		return n
	}
	op := strings.ToUpper(name)
	return commandName{op, "redis." + op}
}

// knownCommands names every known command on its span and in the metrics
// (its upper-case name). It bounds the command label: any other name (a
// typo, a module command built from input) is counted as "OTHER". Looked
// up, the names of a command's span cost no allocation.
var knownCommands = buildNames([]string{
	"append", "bitcount", "bitfield", "bitop", "bitpos", "blmove", "blpop", "brpop", "bzpopmax", "bzpopmin",
	"copy", "dbsize", "decr", "decrby", "del", "discard", "dump", "echo", "eval", "eval_ro", "evalsha", "evalsha_ro",
	"exec", "exists", "expire", "expireat", "expiretime", "fcall", "fcall_ro", "flushall", "flushdb", "function",
	"geoadd", "geodist", "geohash", "geopos", "geosearch", "get", "getbit", "getdel", "getex", "getrange", "getset",
	"hdel", "hexists", "hexpire", "hget", "hgetall", "hgetdel", "hgetex", "hincrby", "hincrbyfloat", "hkeys", "hlen", "hmget", "hmset",
	"hpexpire", "hrandfield", "hscan", "hset", "hsetex", "hsetnx", "hstrlen", "hvals", "incr", "incrby", "incrbyfloat", "info",
	"keys", "lindex", "linsert", "llen", "lmove", "lpop", "lpos", "lpush", "lpushx", "lrange", "lrem", "lset",
	"ltrim", "memory", "mget", "mset", "msetnx", "multi", "object", "persist", "pexpire", "pexpireat", "pexpiretime",
	"pfadd", "pfcount", "pfmerge", "ping", "psetex", "psubscribe", "pttl", "publish", "pubsub", "punsubscribe",
	"randomkey", "rename", "renamenx", "restore", "rpop", "rpoplpush", "rpush", "rpushx", "sadd", "scan", "scard",
	"script", "sdiff", "sdiffstore", "set", "setbit", "setex", "setnx", "setrange", "sinter", "sintercard",
	"sinterstore", "sismember", "smembers", "smismember", "smove", "sort", "spop", "spublish", "srandmember", "srem",
	"sscan", "ssubscribe", "strlen", "subscribe", "sunion", "sunionstore", "sunsubscribe", "time", "touch", "ttl",
	"type", "unlink", "unsubscribe", "unwatch", "wait", "waitaof", "watch", "xack", "xadd", "xautoclaim", "xclaim",
	"xdel", "xgroup", "xinfo", "xlen", "xpending", "xrange", "xread", "xreadgroup", "xrevrange", "xtrim", "zadd",
	"zcard", "zcount", "zdiff", "zincrby", "zinter", "zintercard", "zlexcount", "zmpop", "zmscore", "zpopmax",
	"zpopmin", "zrandmember", "zrange", "zrangebyscore", "zrangestore", "zrank", "zrem", "zremrangebyrank",
	"zremrangebyscore", "zrevrange", "zrevrangebyscore", "zrevrank", "zscan", "zscore", "zunion", "zunionstore",
	"cluster", "config", "debug", "slowlog", "command", "lastsave", "role", "client",
})

func buildNames(names []string) map[string]commandName {
	m := make(map[string]commandName, len(names))
	for _, c := range names {
		up := strings.ToUpper(c)
		m[c] = commandName{up, "redis." + up}
	}
	return m
}
