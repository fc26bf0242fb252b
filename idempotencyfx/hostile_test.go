package idempotencyfx

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// Hostile keys are plain characters: never patterns, never hash-tag tricks
// that merge two keys, quoting that unquotes to the same key is the same key.
func TestHostileKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	distinct := []string{"{x}", "x", "*", "?", "[a-z]", "a*b", strings.Repeat("{", 255), "prefix:{x}:y", `\"`, "%00", "..%2F"}
	seen := map[string]bool{}
	for _, k := range distinct {
		r := e.post("/payments", k, `{}`)
		if r.status != 201 {
			t.Fatalf("key %q: %d %s", k, r.status, r.body)
		}
		if seen[r.body] {
			t.Fatalf("key %q shares a record with another key", k)
		}
		seen[r.body] = true
	}
	// `"x"` (sf-string) is the key x: a replay of it.
	if r := e.post("/payments", `"x"`, `{}`); r.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("quoted form of x is not the same key: %+v", r)
	}
	if n := e.calls.Load(); n != int64(len(distinct)) {
		t.Fatalf("%d executions for %d distinct keys", n, len(distinct))
	}
}

// Hostile bodies get clear answers, no panic, and bounded memory. Not
// parallel: the heap is the process's, and the parallel tests (the
// checker among them) would be measured with it.
func TestHostileBodies(t *testing.T) {
	e := newEnv(t, Config{MaxBodyBytes: 1 << 20}, nil)
	deep := strings.Repeat("[", 250000) + strings.Repeat("]", 250000) // beyond MaxJSONDepth: 400
	cases := map[string]struct {
		body   string
		status int
	}{
		"binary":          {"\x00\x01\xff\xfe binary \x00", 201},
		"invalid utf-8":   {`{"name":"` + "\xc3\x28" + `"}`, 201},
		"deep nesting":    {deep, 400},
		"truncated json":  {`{"a":[1,2,`, 201},
		"huge":            {strings.Repeat("a", 2<<20), 413},
		"just over limit": {strings.Repeat("b", 1<<20+1), 413},
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for name, c := range cases {
		r := e.post("/payments", "body-"+strings.ReplaceAll(name, " ", "-"), c.body)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d (%s)", name, r.status, c.status, r.body)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB for a handful of bounded bodies", grown>>20)
	}
	// Every hostile body that got through is replayed, not re-run.
	calls := e.calls.Load()
	e.post("/payments", "body-binary", cases["binary"].body)
	if e.calls.Load() != calls {
		t.Error("a binary body was not replayed")
	}
	_ = http.StatusOK
}

// net/http writes header names in canonical form, but a request built in
// process (a batch endpoint's sub-request, a test) may hold the key under
// another spelling. Found by an adversary: the lower-case name bypassed the
// layer (the handler ran on every send), and the key under two spellings
// was not refused as sent twice.
func TestKeyHeader_AnySpellingOfTheNameInProcess(t *testing.T) {
	e := newEnv(t, Config{}, nil)
	h := e.http.Config.Handler
	send := func(header http.Header) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Content-Type", "application/json")
		maps.Copy(req.Header, header)
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		return rr
	}
	key := "spelled"
	first := send(http.Header{"idempotency-key": {key}})
	second := send(http.Header{"IDEMPOTENCY-KEY": {key}})
	if n := e.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times for one key sent under two spellings of the name, want 1", n)
	}
	if second.Header().Get(ReplayedHeader) != "true" || second.Body.String() != first.Body.String() {
		t.Errorf("the second send is not a replay of the first: %d %q %s", second.Code, second.Header().Get(ReplayedHeader), second.Body)
	}
	for _, twice := range []http.Header{
		{"Idempotency-Key": {key + "-a"}, "idempotency-key": {key + "-b"}},
		{"Idempotency-Key": {key + "-c"}, "idempotency-key": {key + "-c"}},
	} {
		rr := send(twice)
		if rr.Code != http.StatusBadRequest || !strings.Contains(rr.Body.String(), CodeKeyInvalid) {
			t.Errorf("key sent twice (%v) answered %d %s, want 400 %s", twice, rr.Code, rr.Body, CodeKeyInvalid)
		}
	}
	if n := e.calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1: a key sent twice runs nothing", n)
	}
}
