package tracingfx

import (
	"strings"
)

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
