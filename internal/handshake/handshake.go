// Package handshake recognises the commands go-redis sends on its own to
// set up a new connection: HELLO, then AUTH, SELECT, READONLY and CLIENT
// SETNAME / SETINFO / TRACKING / MAINT_NOTIFICATIONS. They run inside the
// command that needed the connection, with its context and through the
// client's hooks, so every hook sees them as commands; none of them is the
// caller's. tracingfx makes no span or metric of them (AUTH and HELLO carry
// credentials), and storefx's circuit breaker neither counts them nor
// refuses them.
package handshake

import "github.com/redis/go-redis/v9"

// Command reports whether a command named name (lower case, as
// redis.Cmder.Name gives it) is a handshake command.
func Command(name string) bool {
	switch name {
	case "hello", "auth", "select", "readonly", "client":
		return true
	}
	return false
}

// Pipeline reports whether cmds is a handshake pipeline: not empty, and
// handshake commands only.
func Pipeline(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if !Command(cmd.Name()) {
			return false
		}
	}
	return len(cmds) > 0
}
