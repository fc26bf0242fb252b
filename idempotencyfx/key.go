package idempotencyfx

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/redisfx/redisfx"
)

// MaxKeyLength is the longest accepted idempotency key, in characters.
const MaxKeyLength = 255

// ParseKey validates the values of the key header and returns the key: 1 to
// 255 visible ASCII characters, or an RFC 8941 sf-string ("…" with \" and
// \\ escapes, spaces allowed), unquoted, as the IETF idempotency-key draft
// sends it. More than one header line is refused: a proxy that splits or
// merges headers must not turn two requests into one.
func ParseKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", invalidKey("the idempotency key header must be sent exactly once")
	}
	v, quoted := values[0], false
	if v != "" && v[0] == '"' { // a lone `"` too: an sf-string with no closing quote
		var err error
		if v, err = unquote(v); err != nil {
			return "", err
		}
		quoted = true
	}
	switch {
	case v == "":
		return "", invalidKey("the idempotency key is empty")
	case len(v) > MaxKeyLength:
		return "", invalidKey("the idempotency key is longer than 255 characters")
	case quoted && strings.ContainsFunc(v, func(c rune) bool { return c < 0x20 || c > 0x7e }): // sf-string allows spaces
		return "", invalidKey("the idempotency key must be printable ASCII characters only")
	case !quoted && strings.ContainsFunc(v, func(c rune) bool { return c < 0x21 || c > 0x7e }):
		return "", invalidKey("the idempotency key must be visible ASCII characters only")
	}
	return v, nil
}

// unquote decodes an RFC 8941 sf-string.
func unquote(v string) (string, error) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", invalidKey("the quoted idempotency key has no closing quote")
	}
	inner := v[1 : len(v)-1]
	if !strings.ContainsAny(inner, `\"`) {
		return inner, nil
	}
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		switch c := inner[i]; c {
		case '\\':
			i++
			if i == len(inner) || (inner[i] != '"' && inner[i] != '\\') {
				return "", invalidKey("the quoted idempotency key has a bad escape")
			}
			b.WriteByte(inner[i])
		case '"':
			return "", invalidKey("the quoted idempotency key has a stray quote")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func invalidKey(msg string) error {
	return &IdempotencyKeyInvalidError{BaseError: redisfx.BaseError{Code: CodeKeyInvalid, Message: msg}}
}

// keyFromRequest reads the key header (header: its canonical name) in every
// spelling, as a request built in process may hold it.
func keyFromRequest(r *http.Request, header string) (key string, present bool, err error) {
	values, ok := r.Header[header]
	for name, vs := range r.Header {
		if len(name) == len(header) && name != header && strings.EqualFold(name, header) {
			values = append(values[:len(values):len(values)], vs...)
			ok = true
		}
	}
	if !ok {
		return "", false, nil
	}
	key, err = ParseKey(values)
	return key, true, err
}

// storeKey is the Redis key of (scope, key) (docs/idempotency.md, "The
// Redis key"): a key can never pose as a scope.
func storeKey(prefix, scope, key string) string {
	key = keyEscaper.Replace(key)
	if scope == "" {
		return prefix + key
	}
	return prefix + url.QueryEscape(scope) + ":" + key
}

var keyEscaper = strings.NewReplacer("%", "%25", ":", "%3A")
