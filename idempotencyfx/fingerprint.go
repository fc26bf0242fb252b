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
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redisfx/redisfx"
)

// DefaultFingerprint is a hex SHA-256 over the method, the path and query
// the client sent (parameters sorted by name), and the body, canonicalised
// if it is JSON: key order, whitespace and string escapes do not count
// (docs/idempotency.md, "Fingerprint"). A JSON body nested deeper than
// MaxJSONDepth gets IdempotencyBodyTooDeepError (400).
func DefaultFingerprint(r *http.Request, body []byte) (string, error) {
	return fingerprint(r, body, nil)
}

// IgnoreJSONFields returns a fingerprint generator like DefaultFingerprint
// that leaves out volatile fields of a JSON body, such as timestamps and
// request ids. Paths are dot-separated from the root object
// ("meta.request_id"); an array's elements are reached with "[]": "items[].sent_at".
func IgnoreJSONFields(paths ...string) FingerprintGenerator {
	ignore := newIgnoreSet(paths)
	return func(r *http.Request, body []byte) (string, error) {
		return fingerprint(r, body, ignore)
	}
}

func fingerprint(r *http.Request, body []byte, ignore *ignoreSet) (string, error) {
	f, _ := fingerprinters.Get().(*fingerprinter)
	defer fingerprinters.Put(f)
	f.h.Reset()
	path, query := requestTarget(r)
	f.fields(r.Method, path, canonicalQuery(query))
	kind := "bytes"
	if isJSON(r.Header.Get("Content-Type")) {
		switch err := canonical(f.h, body, ignore); { // writes nothing unless it succeeds
		case err == nil:
			kind = "json"
		case errors.Is(err, errTooDeep):
			return "", &IdempotencyBodyTooDeepError{Limit: MaxJSONDepth, BaseError: redisfx.BaseError{Code: CodeBodyTooDeep,
				Message: "the JSON request body is nested deeper than " + strconv.Itoa(MaxJSONDepth) + " levels"}}
		}
	}
	f.fields(kind)
	if kind == "bytes" {
		_, _ = f.h.Write(body)
	}
	var digest [2 * sha256.Size]byte
	hex.Encode(digest[:], f.h.Sum(f.sum[:0]))
	return string(digest[:]), nil
}

// fingerprinter is a reused hasher: a keyed request allocates no hash state.
type fingerprinter struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

var fingerprinters = sync.Pool{New: func() any { return &fingerprinter{h: sha256.New()} }}

// fields hashes each field, length-prefixed.
func (f *fingerprinter) fields(fs ...string) {
	f.buf = f.buf[:0]
	for _, s := range fs {
		f.buf = append(binary.AppendUvarint(f.buf, uint64(len(s))), s...)
	}
	_, _ = f.h.Write(f.buf)
}

// requestTarget is the escaped path and raw query the client sent: a server
// request's RequestURI (parsed only when r.URL differs), else r.URL.
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

// canonicalQuery sorts the parameters by decoded name (as url.ParseQuery
// reads them), keeping the order of one name's values and their raw text.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	type param struct{ name, raw string }
	var ps []param
	for p := range strings.SplitSeq(raw, "&") {
		name, _, _ := strings.Cut(p, "=")
		if decoded, err := url.QueryUnescape(name); err == nil {
			name = decoded
		}
		ps = append(ps, param{name, p})
	}
	slices.SortStableFunc(ps, func(a, b param) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.raw)
	}
	return b.String()
}

// isJSON reports whether a Content-Type is application/json or a +json
// type (without mime.ParseMediaType's map).
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	if len(mt) <= len("application/") || !strings.EqualFold(mt[:len("application/")], "application/") {
		return false
	}
	return strings.EqualFold(mt, "application/json") || strings.EqualFold(mt[len(mt)-5:], "+json")
}

// CanonicalJSON returns the canonical form of a JSON document as hashed by
// DefaultFingerprint, or false if data is not JSON or nests deeper than
// MaxJSONDepth.
func CanonicalJSON(data []byte) ([]byte, bool) {
	var b bytes.Buffer
	if canonical(&b, data, nil) != nil {
		return nil, false
	}
	return b.Bytes(), true
}
