package tracingfx

import (
	"errors"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// credentialCommands may carry credentials in their arguments or replies
// (AUTH and HELLO passwords, ACL SETUSER >password, CONFIG SET requirepass,
// CONFIG GET masterauth, MIGRATE … AUTH, SENTINEL SET <master> auth-pass,
// SENTINEL CONFIG SET sentinel-pass): a span shows them with every
// argument replaced by "?" and never their arguments or reply, whatever
// Spans.IncludeArgs and IncludeResult say. AUTH and HELLO make no span of
// their own (handshake); inside a pipeline they are still written as ?.
var credentialCommands = map[string]bool{"auth": true, "hello": true, "acl": true, "config": true, "migrate": true, "sentinel": true}

// showsArgs reports whether a span may carry the arguments of cmd.
func (h *commandHook) showsArgs(cmd redis.Cmder) bool {
	return h.spans.IncludeArgs && !credentialCommands[cmd.Name()]
}

// showsResult reports whether a span may carry the reply of cmd.
func (h *commandHook) showsResult(cmd redis.Cmder) bool {
	return h.spans.IncludeResult && !credentialCommands[cmd.Name()]
}

// errorText is err's message as the spans of cmds may carry it. Redis
// echoes arguments in some error replies ("ERR unknown command 'JSON.SET',
// with args beginning with: 'user:alice@example.com' …", "ERR Error in ACL
// SETUSER modifier '<old-password>' …"). Unless every command's arguments
// may be shown, a Redis error is cut before its first quote, and reduced to
// its code (ERR, WRONGTYPE …) if it still holds an argument, or a number of
// three or more digits: Redis prints some numeric arguments rounded, which
// no comparison with the arguments finds ("ERR invalid longitude,latitude
// pair 35.689487,139.691706" for a caller's GPS position, helper-75). Errors
// that do not come from Redis (network, timeouts) hold no argument and are
// kept.
func (h *commandHook) errorText(err error, status string, cmds ...redis.Cmder) string {
	msg := err.Error()
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return msg
	}
	shown := true
	for _, c := range cmds {
		shown = shown && h.showsArgs(c)
	}
	if shown {
		return msg
	}
	if i := strings.IndexAny(msg, `'"`); i >= 0 {
		msg = strings.TrimRight(msg[:i], " ,:")
	}
	held := hasNumber(msg)
	for _, c := range cmds {
		for _, a := range c.Args()[1:] {
			if s := argString(a); !held && len(s) >= 3 && strings.Contains(msg, s) {
				held = true
			}
		}
	}
	if !held {
		return msg
	}
	if status == "" {
		return "redis error (message not shown: it holds an argument)"
	}
	return status
}

// hasNumber reports whether msg holds a run of three or more digits.
func hasNumber(msg string) bool {
	run := 0
	for i := 0; i < len(msg); i++ {
		if msg[i] >= '0' && msg[i] <= '9' {
			if run++; run == 3 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// typeName is the exception.type the SDK's RecordError would write.
func typeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String() // a pointer or another unnamed type
	}
	return t.PkgPath() + "." + t.Name()
}

// cutUTF8 is s cut to at most n bytes without splitting a character: a
// cut half of one is invalid UTF-8, which OTLP cannot carry.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
