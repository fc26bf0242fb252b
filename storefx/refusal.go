package storefx

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
)

// setupFields names the Config fields behind a connection's set-up (AUTH or
// HELLO, SELECT), so that Redis's refusal of it names the field to fix.
type setupFields struct {
	password string // where the password comes from; "" when none is set
	db       string // where the database number comes from
	dbNumber int
	cluster  string // what made it a Cluster client
	master   string // where the Sentinel master name comes from; "" without Sentinel
}

// setupFieldsOf says where the password and database of cfg's connections
// come from.
func setupFieldsOf(cfg Config, password string, db int) setupFields {
	from := func(field string, configured bool) string {
		if configured {
			return field
		}
		return "Config.URL"
	}
	f := setupFields{db: from("Config.DB", db == cfg.DB), dbNumber: db, cluster: "Config.URL"}
	if password != "" {
		f.password = from("Config.Password", password == cfg.Password)
	}
	switch {
	case cfg.Cluster:
		f.cluster = "Config.Cluster"
	case len(cfg.Addrs) > 1:
		f.cluster = "Config.Addrs"
	}
	if cfg.sentinel() {
		f.master = from("Config.MasterName", cfg.MasterName != "")
	}
	return f
}

// notReady reports whether err is a reply start-up goes on retrying.
func notReady(err error) bool {
	return redis.IsLoadingError(err) || redis.HasErrorPrefix(err, "BUSY ") || redis.IsMasterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.IsNoReplicasError(err) ||
		redis.IsMaxClientsError(err)
}

// classify tells whether Redis (or every Sentinel) answered a failed
// start-up PING, and whether the answer is a refusal retrying cannot change.
func (f setupFields) classify(err error) (answered bool, refusal error) {
	var joined interface{ Unwrap() []error }
	if f.master != "" && errors.As(err, &joined) { // every Sentinel's error, joined by go-redis
		return f.sentinelRefusal(err, joined.Unwrap())
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false, nil
	}
	if notReady(reply) {
		return true, nil
	}
	return true, f.refusal(reply)
}

// sentinelRefusal classifies go-redis's error when no Sentinel named the
// master: a refusal only when every Sentinel answered.
func (f setupFields) sentinelRefusal(err error, each []error) (answered bool, refusal error) {
	for _, e := range each {
		var reply redis.Error
		if !errors.As(e, &reply) {
			return false, nil // a Sentinel was not reached: it may be yet
		}
		if notReady(e) {
			return true, nil
		}
	}
	first := each[0]
	switch {
	case errors.Is(first, redis.Nil):
		return true, refusalErr(f.master, "no Sentinel of Config.Addrs monitors this master", err)
	case redis.IsAuthError(first):
		return true, refusalErr("Config.SentinelPassword", "the Sentinels refused the Sentinel credentials: "+first.Error(), err)
	case redis.HasErrorPrefix(first, "unknown command"):
		return true, refusalErr("Config.Addrs", "not a Sentinel: with Config.MasterName, Config.Addrs lists the Sentinels: "+first.Error(), err)
	}
	return true, err
}

// refusal wraps Redis's refusal of a connection's set-up in an error naming
// the field to fix, or returns the reply itself.
func (f setupFields) refusal(reply redis.Error) error {
	var field, reason string
	switch {
	case redis.IsAuthError(reply) && f.password == "":
		field, reason = "Config.Password", "Redis requires a password and none is configured"
	case redis.IsAuthError(reply), redis.HasErrorPrefix(reply, "AUTH"):
		field, reason = f.password, "Redis refused the user name and password"
	case redis.HasErrorPrefix(reply, "DB index is out of range"), redis.HasErrorPrefix(reply, "value is out of range"):
		field, reason = f.db, fmt.Sprintf("the server has no database %d (its databases setting, 16 by default, "+
			"is the number of databases; they are numbered from 0)", f.dbNumber)
	case redis.HasErrorPrefix(reply, "SELECT is not allowed in cluster mode"):
		field, reason = f.db, fmt.Sprintf("database %d, but the server is a Redis Cluster node, which has only database 0", f.dbNumber)
	case redis.HasErrorPrefix(reply, "This instance has cluster support disabled"):
		field, reason = f.cluster, "the server is not a Redis Cluster node"
	default:
		return reply
	}
	return refusalErr(field, reason+": "+reply.Error(), reply)
}

func refusalErr(field, reason string, err error) error {
	e := redisfx.NewConfigError("storefx", field, reason)
	e.Err = err
	return e
}
