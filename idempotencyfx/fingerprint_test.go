package idempotencyfx

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func fp(t testing.TB, gen FingerprintGenerator, method, target, ctype, body string) string {
	req, _ := http.NewRequest(method, target, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	s, err := gen(req, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFingerprint(t *testing.T) {
	d := FingerprintGenerator(DefaultFingerprint)
	base := fp(t, d, "POST", "/p?a=1&b=2", "application/json", `{"a":1,"b":[1,2]}`)
	if len(base) != 64 {
		t.Fatalf("not a hex SHA-256: %q", base)
	}
	same := []struct{ name, method, target, ctype, body string }{
		{"key order and whitespace", "POST", "/p?a=1&b=2", "application/json", "{ \"b\": [1, 2],\n\"a\": 1 }"},
		{"query order", "POST", "/p?b=2&a=1", "application/json", `{"a":1,"b":[1,2]}`},
		{"+json type", "POST", "/p?a=1&b=2", "application/merchant+json; charset=utf-8", `{"a":1,"b":[1,2]}`},
		{"string escapes", "POST", "/p?a=1&b=2", "application/json", `{"\u0061":1,"b":[1,2]}`},
	}
	for _, c := range same {
		if got := fp(t, d, c.method, c.target, c.ctype, c.body); got != base {
			t.Errorf("%s: fingerprint differs", c.name)
		}
	}
	differ := []struct{ name, method, target, ctype, body string }{
		{"array order", "POST", "/p?a=1&b=2", "application/json", `{"a":1,"b":[2,1]}`},
		{"method", "PUT", "/p?a=1&b=2", "application/json", `{"a":1,"b":[1,2]}`},
		{"path", "POST", "/q?a=1&b=2", "application/json", `{"a":1,"b":[1,2]}`},
		{"query value", "POST", "/p?a=1&b=3", "application/json", `{"a":1,"b":[1,2]}`},
		{"value", "POST", "/p?a=1&b=2", "application/json", `{"a":2,"b":[1,2]}`},
		{"not json", "POST", "/p?a=1&b=2", "text/plain", `{"a":1,"b":[1,2]}`},
	}
	for _, c := range differ {
		if got := fp(t, d, c.method, c.target, c.ctype, c.body); got == base {
			t.Errorf("%s: fingerprint equal", c.name)
		}
	}
}

func TestIgnoreJSONFields(t *testing.T) {
	g := IgnoreJSONFields("timestamp", "meta.request_id")
	a := fp(t, g, "POST", "/p", "application/json", `{"amount":1,"timestamp":"10:00","meta":{"request_id":"r1","k":1}}`)
	b := fp(t, g, "POST", "/p", "application/json", `{"amount":1,"timestamp":"10:01","meta":{"request_id":"r2","k":1}}`)
	c := fp(t, g, "POST", "/p", "application/json", `{"amount":2,"timestamp":"10:01","meta":{"request_id":"r2","k":1}}`)
	if a != b {
		t.Error("ignored fields changed the fingerprint")
	}
	if a == c {
		t.Error("a real change was ignored")
	}
}

func TestCanonicalJSON_Hostile(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	if _, ok := CanonicalJSON([]byte(deep)); ok {
		t.Error("100k-deep nesting accepted (encoding/json's limit is 10k)")
	}
	for _, in := range []string{"\xff\xfe", `{"a":1} {"b":2}`, `{"a":`, ``} {
		if _, ok := CanonicalJSON([]byte(in)); ok {
			t.Errorf("%q accepted as one JSON document", in)
		}
	}
}

// FuzzCanonicalJSON: canonicalisation never panics, accepts exactly what
// encoding/json accepts, and re-encoding a document (other key order, other
// whitespace) never changes its canonical form, unless the document has keys
// that collide under case folding (whose order the form keeps, and which
// re-encoding through a map reorders) or duplicate keys (which the form
// keeps, and a map does not).
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `[]`, `"\u00e9"`, `1e10`, `{"a":{"b":{"c":[1,2,{"d":"e"}]}}}`, `{"a":1,"a":2}`,
		`"\ud83d\ude00 \ud800 \/"`, "\"\xff\"", `-0.5E+3`, `01`, `{"a" 1}`, `[1,]`, ` {"x":[{}, [], ""]} `,
		`{"amount":1,"Amount":100}`, `{"k":1,"\u212a":2,"K":3}`, `[[[[[[1]]]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c1, ok := CanonicalJSON(data)
		if ok != json.Valid(data) {
			t.Fatalf("canonical accepts %v, encoding/json %v: %q", ok, json.Valid(data), data)
		}
		if !ok {
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("canonical accepted what json rejects: %v", err)
		}
		again, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return
		}
		c2, ok := CanonicalJSON(again)
		if !ok {
			t.Fatalf("re-encoded document refused: %s", again)
		}
		if !hasFoldCollision(v) && !hasDuplicateKeys(data) && !bytes.Equal(c1, c2) {
			t.Fatalf("re-encoding changed the canonical form:\n%s\n%s", data, again)
		}
	})
}

// FuzzParseKey: never panics; accepted keys are 1-255 printable ASCII.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"quoted \" key"`, "", strings.Repeat("x", 256), "\x00", `"`, `"\x"`, "{tag}*?"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := ParseKey([]string{v})
		if err != nil {
			return
		}
		if len(k) == 0 || len(k) > MaxKeyLength {
			t.Fatalf("accepted key of length %d", len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("accepted byte %#x", k[i])
			}
		}
	})
}

// FuzzDecodeResponse: a corrupt record never panics or allocates wildly.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(mustEncode(201, http.Header{"A": {"1", "2"}}, []byte("body")))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeResponse(b)
		if err == nil && !recordableStatus(uint64(r.Status)) {
			t.Fatalf("status %d", r.Status)
		}
	})
}

func TestEncodeDecodeResponse_RoundTrip(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}, "Date": {"now"}}
	b, _ := encodeResponse(402, h, map[string]struct{}{"Date": {}}, []byte(`{"status":"declined"}`))
	r, err := decodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 402 || string(r.Body) != `{"status":"declined"}` || strings.Join(r.Header["X-Multi"], ",") != "a,b" || r.Header.Get("Date") != "" {
		t.Fatalf("round trip: %+v", r)
	}
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json": true, "Application/JSON; charset=utf-8": true, "application/problem+json": true,
		" application/vnd.api+json ;x=y": true, "text/plain": false, "": false, "application/": false,
		"application/jsonx": false, "json": false, "text/json": false,
	} {
		if got := isJSON(ct); got != want {
			t.Errorf("isJSON(%q) = %v, want %v", ct, got, want)
		}
	}
}

// hasFoldCollision reports whether an object in v has two keys that are
// equal under case folding.
// hasDuplicateKeys reports whether an object of the (valid) document has a
// key twice, as encoding/json decodes keys.
func hasDuplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	var objects []map[string]bool // the keys seen in each open object; nil for an array
	expectKey := func() bool { return len(objects) > 0 && objects[len(objects)-1] != nil }
	key := true // the next string in an open object is a key
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch x := tok.(type) {
		case json.Delim:
			switch x {
			case '{':
				objects = append(objects, map[string]bool{})
				key = true
				continue
			case '[':
				objects = append(objects, nil)
			default:
				objects = objects[:len(objects)-1]
			}
		case string:
			if expectKey() && key {
				if objects[len(objects)-1][x] {
					return true
				}
				objects[len(objects)-1][x] = true
				key = false
				continue
			}
		}
		key = true // a value ended: a key comes next in an object
	}
}

func hasFoldCollision(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k, e := range x {
			for _, other := range keys {
				if strings.EqualFold(k, other) {
					return true
				}
			}
			keys = append(keys, k)
			if hasFoldCollision(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasFoldCollision(e) {
				return true
			}
		}
	}
	return false
}

// The record decoder reads varints from the record's text; it must agree
// with encoding/binary on every input: values, truncation and overflow.
func TestDecoderUvarint_AgreesWithEncodingBinary(t *testing.T) {
	t.Parallel()
	inputs := [][]byte{{}, {0}, {1}, {0x7f}, {0x80}, {0x80, 1}, {0xff, 0xff, 0xff, 0xff, 0x0f},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},       // max uint64
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},       // overflow in the 10th byte
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, // 11 bytes
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
			if rng.IntN(3) > 0 {
				b[i] |= 0x80
			}
		}
		inputs = append(inputs, b)
	}
	for _, b := range inputs {
		want, n := binary.Uvarint(b)
		d := decoder{s: string(b)}
		got := d.uvarint()
		if n <= 0 {
			if d.err == nil {
				t.Fatalf("%x: decoded %d, encoding/binary refuses it (%d)", b, got, n)
			}
			continue
		}
		if d.err != nil || got != want || len(d.s) != len(b)-n {
			t.Fatalf("%x: got %d (err %v, %d left), want %d (%d read)", b, got, d.err, len(d.s), want, n)
		}
	}
}

// A replayed header's values share one backing array with the others: an
// append to one (a middleware adding a value after the replay) must not
// change another's.
func TestDecodeRecord_HeadersDoNotShareCapacity(t *testing.T) {
	t.Parallel()
	b, _ := encodeResponse(201, http.Header{"A": {"1"}, "B": {"2"}, "C": {"3", "4"}}, nil, []byte("x"))
	rp, err := decodeRecord(string(b))
	if err != nil {
		t.Fatal(err)
	}
	for i := range rp.header {
		rp.header[i].values = append(rp.header[i].values, "appended")
	}
	rp.marker = append(rp.marker, "appended")
	h := rp.headerMap()
	if h["A"][0] != "1" || h["B"][0] != "2" || strings.Join(h["C"][:2], ",") != "3,4" || rp.marker[0] != "true" {
		t.Fatalf("an append changed another header: %v marker %v", h, rp.marker)
	}
	if rp.status != 201 || rp.body != "x" {
		t.Fatalf("decoded %d %q", rp.status, rp.body)
	}
}

// A replay sends exactly the recorded header, whatever its names and
// values (random sets, seeded), plus the replay marker; Service.Get's
// Response carries the same header.
func TestReplayWrite_SendsTheRecordedHeader(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(16, 26))
	names := []string{"Content-Type", "Location", "X-Multi", "Etag", "Link", "X-A", "X-B"}
	for range 500 {
		h := http.Header{}
		for range rng.IntN(len(names) + 1) {
			name := names[rng.IntN(len(names))]
			for range 1 + rng.IntN(3) {
				h[name] = append(h[name], strings.Repeat("v", rng.IntN(5)))
			}
		}
		b, ok := encodeResponse(200+rng.IntN(300), h, nil, []byte("body"))
		if !ok {
			t.Fatal("encode refused")
		}
		rp, err := decodeRecord(string(b))
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		rp.write(w)
		want := h.Clone()
		want[ReplayedHeader] = []string{"true"}
		if !reflect.DeepEqual(w.Header(), want) {
			t.Fatalf("replayed header %v, recorded %v", w.Header(), h)
		}
		if got := rp.headerMap(); !reflect.DeepEqual(got, h) {
			t.Fatalf("Response header %v, recorded %v", got, h)
		}
	}
}
