package storefx

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx"
)

// setupFields names the Config fields behind what a new connection sends
// before its first command (AUTH or HELLO, SELECT, CLIENT SETNAME), so that
// a refusal of it can name the field to fix.
type setupFields struct {
	db       string // "Config.DB", or "Config.URL" when the URL gives the database
	dbNumber int
	user     string // where the user name comes from ("Config.Username" when none is set)
	password string // where the password comes from; "" when none is configured
	cluster  string // "Config.Cluster" or "Config.Addrs": what made it a Cluster client
	// master is Config.MasterName: set, the client first asks the
	// Sentinels of Config.Addrs, with their own credentials.
	master string
}

// setupFieldsOf says where the set-up of cfg's connections comes from;
// opts are cfg's validated options.
func setupFieldsOf(cfg Config, opts *redis.UniversalOptions) setupFields {
	f := setupFields{db: "Config.DB", dbNumber: opts.DB, user: "Config.Username", cluster: "Config.Addrs", master: cfg.MasterName}
	if cfg.Cluster {
		f.cluster = "Config.Cluster"
	}
	if cfg.Password != "" {
		f.password = "Config.Password"
	}
	if cfg.URL == "" {
		return f
	}
	f.db = "Config.URL"
	if u, err := ParseURL(cfg.URL); err == nil { // options() has parsed it already
		if u.Username != "" {
			f.user = "Config.URL"
		}
		if u.Password != "" {
			f.password = "Config.URL"
		}
	}
	return f
}

// notReadyPrefixes are the answers of a server that is reachable but not
// ready yet (loading its data set, running a long script, without a master
// or a full Cluster yet, at its client limit): start-up goes on retrying.
var notReadyPrefixes = []string{"LOADING ", "BUSY ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "NOREPLICAS ",
	"ERR max number of clients reached"}

// allSentinelsFailed is in go-redis's error when no Sentinel named the
// master: it joins each Sentinel's error, answers included.
const allSentinelsFailed = "all sentinels specified in configuration are unreachable"

// classify tells a failed start-up PING's error apart: answered reports
// that Redis (or every Sentinel) answered it, and refusal, when not nil,
// is an answer that retrying cannot change, naming the field to fix.
func (f setupFields) classify(err error) (answered bool, refusal error) {
	if f.master != "" && strings.Contains(err.Error(), allSentinelsFailed) {
		return f.sentinelRefusal(err)
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

// notReady reports whether reply is that of a server not ready yet.
func notReady(reply redis.Error) bool {
	for _, p := range notReadyPrefixes {
		if strings.HasPrefix(reply.Error(), p) {
			return true
		}
	}
	return false
}

// sentinelRefusal classifies go-redis's error when no Sentinel named the
// master. Only when every Sentinel answered, and with a refusal, is it one:
// an unknown master name (redis.Nil) or the Sentinels' credentials.
func (f setupFields) sentinelRefusal(err error) (answered bool, refusal error) {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return false, nil
	}
	var first redis.Error
	for _, e := range joined.Unwrap() {
		var reply redis.Error
		if !errors.As(e, &reply) {
			return false, nil // a Sentinel was not reached: it may be yet
		}
		if notReady(reply) {
			return true, nil
		}
		if first == nil {
			first = reply
		}
	}
	if first == nil {
		return false, nil
	}
	var field, reason string
	tail := ": " + first.Error()
	switch msg := first.Error(); {
	case errors.Is(first, redis.Nil):
		field, reason, tail = "Config.MasterName", fmt.Sprintf("no Sentinel of Config.Addrs monitors a master named %q", f.master), ""
	case strings.Contains(msg, "unknown command"):
		field, reason = "Config.Addrs", "not a Sentinel: with Config.MasterName set, Config.Addrs lists the Sentinels, not the master"
	case strings.HasPrefix(msg, "NOAUTH "):
		field, reason = "Config.SentinelPassword", "the Sentinels require a password (Config.SentinelPassword)"
	case strings.HasPrefix(msg, "NOPERM "):
		field, reason = "Config.SentinelUsername", "the Sentinels' ACL user may not ask for the master"
	case redis.IsAuthError(first):
		field, reason = "Config.SentinelPassword", "the Sentinels refused the user name (Config.SentinelUsername) and password (Config.SentinelPassword)"
	default:
		return true, err
	}
	e := redisfx.NewConfigError("storefx", field, reason+tail)
	e.Err = err
	return true, e
}

// refusal turns Redis's refusal of a connection's set-up or of PING into an
// error naming the field to fix: a *redisfx.ConfigError wrapping the reply
// when the field can be known, else the reply itself. Redis's replies
// never repeat a password, and neither does this.
func (f setupFields) refusal(reply redis.Error) error {
	msg := reply.Error()
	var field, reason string
	switch {
	case strings.HasPrefix(msg, "NOAUTH "):
		if f.password == "" {
			field, reason = "Config.Password", "Redis requires a password and none is configured "+
				"(set Config.Password, or user:password in Config.URL)"
		} else {
			field, reason = f.password, "Redis still requires authentication after the password was sent"
		}
	case strings.HasPrefix(msg, "WRONGPASS "), redis.IsAuthError(reply),
		strings.Contains(msg, "called without any password configured"), strings.Contains(msg, "invalid password"):
		field = f.password
		if field == "" {
			field = f.user
		}
		reason = "Redis refused the user name (" + f.user + "; unset: the default user) and password"
		if f.password != "" {
			reason += " (" + f.password + ")"
		}
	case strings.HasPrefix(msg, "NOPERM "):
		field, reason = f.user, "the ACL user may not run a command of the connection's set-up (AUTH, SELECT, CLIENT SETNAME) or PING"
	case strings.Contains(msg, "SELECT is not allowed in cluster mode"):
		field, reason = f.db, fmt.Sprintf("database %d, but the server is a Redis Cluster node, which has only database 0", f.dbNumber)
	case strings.Contains(msg, "DB index is out of range"), strings.Contains(msg, "invalid DB index"),
		strings.Contains(msg, "value is out of range"):
		field, reason = f.db, fmt.Sprintf("the server has no database %d (its databases setting, 16 by default, "+
			"is the number of databases; they are numbered from 0)", f.dbNumber)
	case strings.Contains(msg, "Client names cannot contain"):
		field, reason = "Config.ClientName", "Redis refused the client name"
	case strings.Contains(msg, "cluster support disabled"):
		field, reason = f.cluster, "the server is not a Redis Cluster node: for a standalone server give one address and leave Cluster false"
	default:
		return reply
	}
	e := redisfx.NewConfigError("storefx", field, reason+": "+msg)
	e.Err = reply
	return e
}
