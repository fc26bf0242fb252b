package plugintrace

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
)

// Redacted is the value a key takes under RedactKey.
const Redacted = "[redacted]"

// KeyAttribute is how a plugin writes the keys its callers choose (a lock
// name, a cache key, a rate-limit key) into span attributes and error
// messages: keys often hold personal data (a card number, an e-mail, an IP
// address). The zero value is RedactKey.
type KeyAttribute struct {
	mode   keyMode
	secret []byte
}

type keyMode uint8

const (
	keyRedact keyMode = iota
	keyRaw
	keyHash
)

// RedactKey writes every key as "[redacted]": the attribute is there, so
// queries on it keep working, but says nothing about the key. The default.
func RedactKey() KeyAttribute { return KeyAttribute{} }

// RawKey writes keys as given: only for keys that identify nothing
// sensitive, or where traces are handled like the data itself.
func RawKey() KeyAttribute { return KeyAttribute{mode: keyRaw} }

// HashKey writes each key as a short digest, the same for the same key, so
// the spans of one key can be found together: "hmac-sha256:" and the first
// 16 hex digits of HMAC-SHA-256(secret, key), or, with an empty secret,
// "sha256:" and those of SHA-256(key). Use a secret for keys with few
// possible values (a card number is found again from its unkeyed digest).
func HashKey(secret []byte) KeyAttribute {
	return KeyAttribute{mode: keyHash, secret: append([]byte(nil), secret...)}
}

// String names the policy: "redact", "raw", "sha256" or "hmac-sha256".
// It never includes the secret.
func (p KeyAttribute) String() string {
	switch {
	case p.mode == keyRaw:
		return "raw"
	case p.mode == keyHash && len(p.secret) > 0:
		return "hmac-sha256"
	case p.mode == keyHash:
		return "sha256"
	}
	return "redact"
}

// Value is key as the policy writes it.
func (p KeyAttribute) Value(key string) string {
	switch p.mode {
	case keyRaw:
		return key
	case keyHash:
		if len(p.secret) == 0 {
			sum := sha256.Sum256([]byte(key))
			return "sha256:" + hex.EncodeToString(sum[:8])
		}
		m := hmac.New(sha256.New, p.secret)
		m.Write([]byte(key))
		return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil)[:8])
	}
	return Redacted
}

// Values is each of keys as the policy writes it.
func (p KeyAttribute) Values(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = p.Value(k)
	}
	return out
}

// Quote is key as the policy writes it, for an error message: quoted as
// %q quotes it when raw, bare otherwise.
func (p KeyAttribute) Quote(key string) string {
	if p.mode == keyRaw {
		return strconv.Quote(key)
	}
	return p.Value(key)
}

// SetKey sets the attribute k to keys, comma-separated, as policy p
// writes them, on a span that records (an unsampled span costs no
// hashing). A nil span is ignored.
func (s *Span) SetKey(k attribute.Key, p KeyAttribute, keys ...string) {
	if s == nil || !s.IsRecording() {
		return
	}
	if len(keys) == 1 {
		s.SetAttributes(k.String(p.Value(keys[0])))
		return
	}
	s.SetAttributes(k.String(strings.Join(p.Values(keys), ",")))
}
