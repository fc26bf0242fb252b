package idempotencyfx

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// DefaultFingerprint is a hex SHA-256 over the method, the path, the
// canonical query and the body. The path and query are those the client
// sent (the request's RequestURI), even when a middleware such as
// http.StripPrefix rewrote r.URL before the route. JSON bodies
// (Content-Type application/json or any +json type) are canonicalised
// first: key order and whitespace do not change the fingerprint, array
// order does, and "\u0041" equals "A".
// Numbers are compared by their literal text (1.0 and 1 differ). Object
// keys that differ only in case ("amount", "Amount") keep their order, as
// it decides what encoding/json decodes into a struct, and so do keys that
// are one integer written differently ("1", "01", "+1"), as it decides what
// encoding/json decodes into a map with an integer key type. Map keys of a
// type implementing encoding.TextUnmarshaler may parse in any way, which no
// canonical form covers: a handler that decodes such maps needs a
// FingerprintGenerator that hashes the body's bytes. A body that claims
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
	f, ok := fingerprinters.Get().(*fingerprinter)
	if !ok {
		f = &fingerprinter{h: sha256.New()}
	}
	defer f.release()
	path, query := requestTarget(r)
	f.field(r.Method)
	f.field(path)
	f.field(canonicalQuery(query))
	f.flush()
	json := false
	if isJSON(contentType(r.Header)) {
		switch err := canonical(f.h, body, ignore); { // writes nothing unless it succeeds
		case err == nil:
			json = true
		case errors.Is(err, errTooDeep):
			return "", bodyTooDeep()
		}
	}
	if json {
		f.field("json")
		f.flush()
	} else { // not JSON: nothing was written for it
		f.field("bytes")
		f.flush()
		_, _ = f.h.Write(body)
	}
	var digest [2 * sha256.Size]byte
	hex.Encode(digest[:], f.h.Sum(f.sum[:0]))
	return string(digest[:]), nil
}

// requestTarget is the escaped path and raw query the client sent. A
// middleware may have rewritten r.URL on the way (http.StripPrefix turns
// /v1/payments and /v2/payments both into /payments): the fingerprint
// must tell those requests apart, so on a server request it reads
// r.RequestURI, which such rewrites leave alone. When r.URL still says what
// RequestURI says (every request nothing rewrote) it is used as it is, with
// no parsing; a request built for a client (RequestURI empty) has only r.URL.
func requestTarget(r *http.Request) (path, query string) {
	path, query = r.URL.EscapedPath(), r.URL.RawQuery
	uri := r.RequestURI
	if uri == "" {
		return path, query
	}
	if rest, ok := strings.CutPrefix(uri, path); ok {
		q, hasQuery := strings.CutPrefix(rest, "?")
		if rest == "" && query == "" || hasQuery && q == query {
			return path, query // nothing rewrote r.URL
		}
	}
	if u, err := url.ParseRequestURI(uri); err == nil && u.Opaque == "" {
		return u.EscapedPath(), u.RawQuery
	}
	return path, query
}

// fingerprinter is a SHA-256 and a scratch buffer, pooled: the fields
// before and after the body are gathered in the buffer and written in one
// call. What is hashed, and so every fingerprint, does not depend on how
// the writes are cut: each field is its length as a uvarint, then its text.
type fingerprinter struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte // Sum appends here: buf may be too short, and growing it allocates
}

var fingerprinters = sync.Pool{New: func() any { return &fingerprinter{h: sha256.New()} }}

func (f *fingerprinter) field(s string) {
	f.buf = binary.AppendUvarint(f.buf, uint64(len(s)))
	f.buf = append(f.buf, s...)
}

func (f *fingerprinter) flush() {
	_, _ = f.h.Write(f.buf)
	f.buf = f.buf[:0]
}

func (f *fingerprinter) release() {
	f.h.Reset()
	if cap(f.buf) > 1<<10 { // a long path or query: not kept
		f.buf = nil
	}
	f.buf = f.buf[:0]
	fingerprinters.Put(f)
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

// contentType is the first Content-Type value, read under its canonical
// name as Header.Get reads it, without Get's canonicalisation of the name
// on every call (~400 instructions per keyed request).
func contentType(h http.Header) string {
	if v := h["Content-Type"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// isJSON reports whether a Content-Type is application/json or a +json
// type, parameters and case ignored (without mime.ParseMediaType's map).
func isJSON(contentType string) bool {
	if contentType == "application/json" { // what nearly every JSON client sends
		return true
	}
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
// keys equal under case folding counts, and so does the order of keys that
// are one integer ([+-]digits of one value), and that text that is not valid
// UTF-8 (invalid bytes, lone surrogate escapes such as "\ud800") reads as
// U+FFFD, as encoding/json decodes it. A document nested deeper than
// MaxJSONDepth has no canonical form.
func CanonicalJSON(data []byte) ([]byte, bool) {
	var b bytes.Buffer
	if canonical(&b, data, nil) != nil {
		return nil, false
	}
	return b.Bytes(), true
}
