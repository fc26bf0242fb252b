package idempotencyfx

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"io"
	"mime"
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

func isJSON(contentType string) bool {
	if contentType == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
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
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return false
	}
	if _, err := dec.Token(); err != io.EOF { // trailing data: not one JSON document
		return false
	}
	c := canonicalWriter{w: w, ignore: ignore}
	c.value(v, "")
	return true
}

// canonicalWriter serialises a decoded JSON value unambiguously: a type tag,
// then length-prefixed contents, with object members sorted by key.
type canonicalWriter struct {
	w      io.Writer
	ignore map[string]struct{}
	n      [binary.MaxVarintLen64]byte
}

func (c *canonicalWriter) tag(t byte, n int) {
	c.n[0] = t
	k := binary.PutUvarint(c.n[1:], uint64(n))
	_, _ = c.w.Write(c.n[:1+k])
}

func (c *canonicalWriter) value(v any, path string) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if c.ignore != nil {
				if _, skip := c.ignore[join(path, k)]; skip {
					continue
				}
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		c.tag('o', len(keys))
		for _, k := range keys {
			c.tag('k', len(k))
			_, _ = io.WriteString(c.w, k)
			c.value(v[k], join(path, k))
		}
	case []any:
		c.tag('a', len(v))
		for _, e := range v {
			c.value(e, path+"[]")
		}
	case string:
		c.tag('s', len(v))
		_, _ = io.WriteString(c.w, v)
	case json.Number:
		c.tag('n', len(v))
		_, _ = io.WriteString(c.w, string(v))
	case bool:
		if v {
			c.tag('t', 0)
		} else {
			c.tag('f', 0)
		}
	default: // nil
		c.tag('z', 0)
	}
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

var _ hash.Hash = sha256.New()
