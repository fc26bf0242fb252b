// Package handshake recognises the commands go-redis sends on its own to
// set up a new connection: HELLO (or AUTH), then a pipeline of SELECT,
// READONLY, CLIENT SETNAME and CLIENT TRACKING, CLIENT MAINT_NOTIFICATIONS,
// and a pipeline of CLIENT SETINFO. They run inside the command that needed
// the connection, with its context and through the client's hooks, so
// every hook sees them as commands although none is the caller's: tracingfx
// makes no span or metric of them (AUTH and HELLO carry credentials), and
// storefx's circuit breaker does not count them.
//
// They are told apart by what they are, so an application sending one of
// them itself (its own HELLO, AUTH, CLIENT SETNAME, ...) is treated alike;
// every other command, CLIENT ID, CLIENT LIST or a lone SELECT included, is
// the caller's.
package handshake

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// Command reports whether a command named name (lower case, as
// redis.Cmder.Name gives it) with arguments args is a handshake command
// sent on its own: HELLO, AUTH, or CLIENT SETNAME / SETINFO / TRACKING /
// MAINT_NOTIFICATIONS.
func Command(name string, args []any) bool {
	switch name {
	case "hello", "auth":
		return true
	case "client":
		if len(args) < 2 {
			return false
		}
		sub, _ := args[1].(string)
		switch strings.ToLower(sub) {
		case "setname", "setinfo", "tracking", "maint_notifications":
			return true
		}
	}
	return false
}

// Pipeline reports whether cmds is a handshake pipeline: not empty, and
// made of handshake commands, SELECT and READONLY only.
func Pipeline(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		switch name := cmd.Name(); name {
		case "select", "readonly":
		default:
			if !Command(name, cmd.Args()) {
				return false
			}
		}
	}
	return len(cmds) > 0
}
