package tracingfx

import (
	"errors"
	"reflect"
	"slices"
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

// errorText is err's message as the spans of cmds may carry it: Redis
// echoes arguments in some error replies. Unless every command's arguments
// may be shown, a Redis error is cut before its first quote, and reduced to
// its code (see errorCode) if it still holds an argument (whatever the
// case) or a number of three or more digits (Redis prints some arguments
// rounded). Other errors (network, timeouts) hold no argument.
func (h *commandHook) errorText(err error, status string, cmds ...redis.Cmder) string {
	msg := err.Error()
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return msg
	}
	if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return !h.showsArgs(c) }) {
		return msg
	}
	if i := strings.IndexAny(msg, `'"`); i >= 0 {
		msg = strings.TrimRight(msg[:i], " ,:")
	}
	upper := strings.ToUpper(msg) // whatever the case: a script may change it
	if !hasNumber(msg) && !anyArg(cmds, func(arg string) bool { return strings.Contains(upper, arg) }) {
		return msg
	}
	if status == "" {
		return "redis error (message not shown: it holds an argument)"
	}
	return status
}

// hasNumber reports whether msg holds a number written with three or more
// digits, counted across a decimal point and an exponent ("139.691706",
// "12.5", "1.2e+16": a script's message may reformat an argument).
func hasNumber(msg string) bool {
	digits := 0
	for i := 0; i < len(msg); i++ {
		switch c := msg[i]; {
		case c >= '0' && c <= '9':
			if digits++; digits == 3 {
				return true
			}
		case c == '.' && digits > 0:
		case (c == 'e' || c == 'E') && digits > 0:
			if i+1 < len(msg) && (msg[i+1] == '+' || msg[i+1] == '-') {
				i++ // the exponent's sign
			}
		default:
			digits = 0
		}
	}
	return false
}

// redisCodes are the error codes Redis itself answers with.
var redisCodes = map[string]bool{
	"ERR": true, "WRONGTYPE": true, "NOSCRIPT": true, "BUSY": true, "BUSYKEY": true, "BUSYGROUP": true,
	"LOADING": true, "MASTERDOWN": true, "READONLY": true, "NOAUTH": true, "NOPERM": true, "WRONGPASS": true,
	"OOM": true, "EXECABORT": true, "CROSSSLOT": true, "CLUSTERDOWN": true, "TRYAGAIN": true, "MOVED": true,
	"ASK": true, "NOREPLICAS": true, "MISCONF": true, "UNBLOCKED": true, "NOGROUP": true, "NOPROTO": true,
	"UNKILLABLE": true, "NOTBUSY": true,
}

// errorCode is code, the first word of a Redis error, as a span may carry
// it, or "" when it may be the caller's data (a script's error_reply can
// begin with an argument): Redis's own codes are kept, any other unless it
// holds or is held in an argument of three or more characters.
func errorCode(code string, cmds []redis.Cmder) string {
	if code == "" || redisCodes[code] || !anyArg(cmds, func(arg string) bool { return strings.Contains(code, arg) || strings.Contains(arg, code) }) {
		return code
	}
	return ""
}

// anyArg reports whether f holds for an argument of cmds of three or more
// bytes, upper-cased.
func anyArg(cmds []redis.Cmder, f func(arg string) bool) bool {
	for _, c := range cmds {
		for _, a := range c.Args()[1:] {
			if s := argString(a); len(s) >= 3 && f(strings.ToUpper(s)) {
				return true
			}
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
