package idempotencyfx

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net/http"
	"sort"
	"strings"
)

// DefaultFingerprint is a hex SHA-256 over the method, the path, the
// canonical query and the body. JSON bodies (Content-Type application/json
// or any +json type) are canonicalised first: key order and whitespace do
// not change the fingerprint, array order does, and "\u0041" equals "A".
// Numbers are compared by their literal text (1.0 and 1 differ). A body that
// claims to be JSON but does not parse is hashed as bytes, like any other.
func DefaultFingerprint(r *http.Request, body []byte) (string, error) {
	return fingerprint(r, body, nil)
}

// IgnoreJSONFields returns a fingerprint generator like DefaultFingerprint
// that leaves out volatile fields of a JSON body, such as timestamps and
// request ids. Paths are dot-separated from the root object:
//
//	idempotencyfx.IgnoreJSONFields("timestamp", "meta.request_id")
func IgnoreJSONFields(paths ...string) FingerprintGenerator {
	ignore := map[string]struct{}{}
	for _, p := range paths {
		ignore[p] = struct{}{}
	}
	return func(r *http.Request, body []byte) (string, error) {
		return fingerprint(r, body, ignore)
	}
}

func fingerprint(r *http.Request, body []byte, ignore map[string]struct{}) (string, error) {
	h := sha256.New()
	writeField(h, r.Method)
	writeField(h, r.URL.EscapedPath())
	writeField(h, canonicalQuery(r.URL.RawQuery))
	if isJSON(r.Header.Get("Content-Type")) && hashCanonicalJSON(h, body, ignore) {
		writeField(h, "json")
	} else {
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
// of one name (which is meaningful).
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	sort.SliceStable(parts, func(i, j int) bool {
		ki, _, _ := strings.Cut(parts[i], "=")
		kj, _, _ := strings.Cut(parts[j], "=")
		return ki < kj
	})
	return strings.Join(parts, "&")
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
// insignificant whitespace (and string escapes).
func CanonicalJSON(data []byte) ([]byte, bool) {
	var b bytes.Buffer
	if !hashCanonicalJSON(&b, data, nil) {
		return nil, false
	}
	return b.Bytes(), true
}

func hashCanonicalJSON(w io.Writer, data []byte, ignore map[string]struct{}) bool {
	return canonical(w, data, ignore)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
