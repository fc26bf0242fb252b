package tracingfx

import (
	"encoding"
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

// argString is an argument as Redis receives it, as go-redis writes it: a
// bool as 1 or 0, a duration in nanoseconds, a time in RFC 3339, a
// BinaryMarshaler as its bytes, and a pointer to any of these (idempotencyfx
// passes its script arguments so) as the value it points to, a nil one as
// the zero value.
func argString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 64)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		if x {
			return "1"
		}
		return "0"
	case time.Duration:
		return strconv.FormatInt(x.Nanoseconds(), 10)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case *time.Time:
		if x == nil {
			return time.Time{}.Format(time.RFC3339Nano)
		}
		return x.Format(time.RFC3339Nano)
	case encoding.BinaryMarshaler:
		if b, err := x.MarshalBinary(); err == nil {
			return string(b)
		}
	}
	if p := reflect.ValueOf(v); p.Kind() == reflect.Pointer {
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
