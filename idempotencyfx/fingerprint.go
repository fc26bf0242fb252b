package idempotencyfx

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// DefaultFingerprint is a hex SHA-256 over the method, the path, the
// canonical query and the body. JSON bodies (Content-Type application/json
// or any +json type) are canonicalised first: key order and whitespace do
// not change the fingerprint, array order does, and "\u0041" equals "A".
// Numbers are compared by their literal text (1.0 and 1 differ). Object
// keys that differ only in case ("amount", "Amount") keep their order, as
// it decides what encoding/json decodes into a struct. A body that claims
// to be JSON but does not parse is hashed as bytes, like any other; one
// nested deeper than MaxJSONDepth is refused with
// IdempotencyBodyTooDeepError (400). The work is linear in the body's size.
func DefaultFingerprint(r *http.Request, body []byte) (string, error) {
	return fingerprint(r, body, nil)
}

// IgnoreJSONFields returns a fingerprint generator like DefaultFingerprint
// that leaves out volatile fields of a JSON body, such as timestamps and
// request ids. Paths are dot-separated from the root object:
//
//	idempotencyfx.IgnoreJSONFields("timestamp", "meta.request_id")
//
// An element of an array is reached with "[]": "items[].sent_at".
func IgnoreJSONFields(paths ...string) FingerprintGenerator {
	ignore := newIgnoreSet(paths)
	return func(r *http.Request, body []byte) (string, error) {
		return fingerprint(r, body, ignore)
	}
}

func fingerprint(r *http.Request, body []byte, ignore *ignoreSet) (string, error) {
	h := sha256.New()
	writeField(h, r.Method)
	writeField(h, r.URL.EscapedPath())
	writeField(h, canonicalQuery(r.URL.RawQuery))
	json := false
	if isJSON(r.Header.Get("Content-Type")) {
		switch err := canonical(h, body, ignore); {
		case err == nil:
			json = true
		case errors.Is(err, errTooDeep):
			return "", bodyTooDeep()
		}
	}
	if json {
		writeField(h, "json")
	} else { // not JSON: nothing was written for it
		writeField(h, "bytes")
		_, _ = h.Write(body)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])), nil
}

func writeField(h io.Writer, s string) {
	var n [binary.MaxVarintLen64]byte
	_, _ = h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	_, _ = io.WriteString(h, s)
}

// canonicalQuery sorts the parameters by name, keeping the order of values
// of one name (which is meaningful). Names are compared decoded, as the
// handler reads them (url.ParseQuery): "a", "%61" and "a+b"/"a%20b" are one
// name, so two of them swapped reorder that name's values and change the
// fingerprint. The parameters keep their raw text, so differently escaped
// but equal requests may differ (a 422, never a wrong replay).
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	names := make([]string, len(parts))
	for i, p := range parts {
		name, _, _ := strings.Cut(p, "=")
		if strings.ContainsAny(name, "%+") {
			if decoded, err := url.QueryUnescape(name); err == nil {
				name = decoded
			}
		}
		names[i] = name
	}
	sort.Stable(byName{parts, names})
	return strings.Join(parts, "&")
}

// byName sorts query parameters by their decoded names.
type byName struct{ parts, names []string }

func (b byName) Len() int           { return len(b.parts) }
func (b byName) Less(i, j int) bool { return b.names[i] < b.names[j] }
func (b byName) Swap(i, j int) {
	b.parts[i], b.parts[j] = b.parts[j], b.parts[i]
	b.names[i], b.names[j] = b.names[j], b.names[i]
}

// isJSON reports whether a Content-Type is application/json or a +json
// type, parameters and case ignored (without mime.ParseMediaType's map).
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	if len(mt) <= len("application/") || !strings.EqualFold(mt[:len("application/")], "application/") {
		return false
	}
	return strings.EqualFold(mt, "application/json") || strings.EqualFold(mt[len(mt)-5:], "+json")
}

// CanonicalJSON returns the canonical form of a JSON document as hashed by
// DefaultFingerprint, or false if data is not JSON. Two documents have the
// same canonical form exactly when they differ only in object key order and
// insignificant whitespace (and string escapes), except that the order of
// keys equal under case folding counts. A document nested deeper than
// MaxJSONDepth has no canonical form.
func CanonicalJSON(data []byte) ([]byte, bool) {
	var b bytes.Buffer
	if canonical(&b, data, nil) != nil {
		return nil, false
	}
	return b.Bytes(), true
}
