// Package handshake recognises the commands go-redis sends on its own to
// set up a new connection. They run through the client's hooks inside the
// command that needed the connection, so every hook sees them: tracingfx
// makes no span or metric of them (AUTH and HELLO carry credentials), and
// storefx's circuit breaker does not count them. An application's own HELLO,
// AUTH or CLIENT SETNAME is treated alike.
package handshake

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// Command reports whether a command named name (lower case, as
// redis.Cmder.Name gives it) with arguments args is a handshake command
// sent on its own.
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
