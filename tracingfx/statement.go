package tracingfx

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// statement is the command with every argument replaced by "?", or with
// the arguments (cut) when IncludeArgs is on and the command carries no
// credentials.
func (h *commandHook) statement(name string, cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) <= 1 {
		return name
	}
	if h.showsArgs(cmd) {
		return h.cut(name + " " + joinArgs(args[1:]))
	}
	var b strings.Builder
	b.Grow(len(name) + 2*len(args))
	b.WriteString(name)
	for range args[1:] {
		b.WriteString(" ?")
	}
	return b.String()
}

// cut cuts s at Spans.MaxArgLength bytes, never inside a character.
func (h *commandHook) cut(s string) string { return cutUTF8(s, h.spans.MaxArgLength) }

func joinArgs(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = argString(a)
	}
	return strings.Join(parts, " ")
}

// argString is an argument as Redis receives it (as go-redis writes it,
// which writes a pointer to a string, a number, a bool, a time or a
// duration as the value it points to, and a nil one as its zero value).
func argString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case *string:
		if x == nil {
			return ""
		}
		return *x
	case []byte:
		return string(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Duration:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	if p := reflect.ValueOf(v); p.Kind() == reflect.Pointer && p.Type().Elem().Kind() != reflect.Struct {
		if p.IsNil() {
			return argString(reflect.Zero(p.Type().Elem()).Interface())
		}
		return argString(p.Elem().Interface())
	}
	return strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(fmt.Sprint(v), "\n", " "), "\r", " "))
}

func resultString(cmd redis.Cmder) string {
	s := cmd.String() // "get key: value"
	if i := strings.Index(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
