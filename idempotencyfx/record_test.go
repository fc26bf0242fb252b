package idempotencyfx

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// Found by an adversary: the headers that are never recorded (SkipHeaders,
// hop-by-hop) were matched by their canonical names only, so a handler
// writing w.Header()["set-cookie"] had its cookie recorded and sent to every
// replay of the key (and a lower-case "date" gave replays two Dates).
func TestRecord_SkippedHeadersWhateverTheirCase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["set-cookie"] = []string{"session=first-client"}
		w.Header()["date"] = []string{"Mon, 01 Jan 2001 00:00:00 GMT"}
		w.Header()["keep-alive"] = []string{"timeout=5"}
		w.Header()["SET-COOKIE"] = []string{"other=first-client"}
		w.Header()["x-kept"] = []string{"yes"}
		w.WriteHeader(http.StatusCreated)
	})
	first := e.post("/payments", "lower-case-skip", `{}`)
	wantStatus(t, first, http.StatusCreated, "")
	replay := e.post("/payments", "lower-case-skip", `{}`)
	wantStatus(t, replay, http.StatusCreated, "")
	if replay.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("second request not a replay: %v", replay.header)
	}
	if c := replay.header.Values("Set-Cookie"); len(c) != 0 {
		t.Errorf("replay carries Set-Cookie %q", c)
	}
	if d := replay.header.Values("Date"); len(d) != 1 || d[0] == "Mon, 01 Jan 2001 00:00:00 GMT" {
		t.Errorf("replay Date %q, want net/http's own, once", d)
	}
	if k := replay.header.Values("Keep-Alive"); len(k) != 0 {
		t.Errorf("replay carries Keep-Alive %q", k)
	}
	if replay.header.Get("X-Kept") != "yes" {
		t.Errorf("replay lost a recorded header: %v", replay.header)
	}
	stored, err := e.svc.Get(context.Background(), "", "lower-case-skip")
	if err != nil || stored == nil || stored.Response == nil {
		t.Fatalf("Get: %+v, %v", stored, err)
	}
	for k := range stored.Response.Header {
		if skipped(e.svc.cfg.skip, k) {
			t.Errorf("recorded header %q is one never recorded", k)
		}
	}
}

// Found by an adversary: a record whose status is informational (which the
// recorder never writes) was replayed as an interim 1xx carrying the
// recorded headers, followed by an implicit 200 with the replay marker. It
// is refused as unreadable, as other corruptions are.
func TestRecord_InformationalStatusIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	ctx := context.Background()
	for _, status := range []int{100, 102, 103, 150, 199} {
		key := "informational-" + strconv.Itoa(status)
		wantStatus(t, e.post("/payments", key, `{}`), http.StatusCreated, "")
		blob, _ := encodeResponse(status, http.Header{"X-Recorded": {"a"}}, nil, []byte("body"))
		if err := e.rdb.HSet(ctx, e.svc.StoreKey("", key), "r", blob).Err(); err != nil {
			t.Fatal(err)
		}
		r := e.post("/payments", key, `{}`)
		wantStatus(t, r, http.StatusInternalServerError, CodeStoreUnavailable)
		if r.header.Get("X-Recorded") != "" || r.header.Get(ReplayedHeader) != "" {
			t.Errorf("status %d: refused record's headers sent: %v", status, r.header)
		}
		if _, err := e.svc.Get(ctx, "", key); err == nil {
			t.Errorf("status %d: Get read the record without an error", status)
		}
	}
	for _, status := range []int{101, 200, 599, 999} {
		blob, _ := encodeResponse(status, nil, nil, nil)
		if rp, err := decodeRecord(string(blob)); err != nil || rp.status != status {
			t.Errorf("status %d: decoded %d, %v", status, rp.status, err)
		}
	}
}

// Found by an adversary: the fingerprint read the path from r.URL, which
// http.StripPrefix rewrites, so /v1/payments and /v2/payments with one key
// had one fingerprint and v2 was sent v1's answer. The fingerprint reads
// the path the client sent.
func TestFingerprint_PathAsTheClientSentIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	wantStatus(t, e.post("/v1/payments", "stripped", `{"amount":1}`), http.StatusCreated, "")
	second := e.post("/v2/payments", "stripped", `{"amount":1}`)
	wantStatus(t, second, http.StatusUnprocessableEntity, CodeKeyReused)
	if n := e.calls.Load(); n != 1 {
		t.Fatalf("%d runs, want 1 (the second request refused)", n)
	}
	replay := e.post("/v1/payments", "stripped", `{"amount":1}`)
	if replay.header.Get(ReplayedHeader) != "true" {
		t.Fatalf("the same request again was not replayed: %d %s", replay.status, replay.body)
	}
}

// requestTarget answers as r.URL does for every request nothing rewrote
// (so no fingerprint recorded before changes), and the original target for
// one that StripPrefix rewrote. Seeded random paths and queries.
func TestRequestTarget_UnchangedUnlessRewritten(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(25, 11))
	pieces := []string{"a", "b", "%2F", "%20", "~", "%7E", "é", "%C3%A9", ";", ":", "@", "+", "-", "."}
	qpieces := []string{"x=1", "y=%20", "z", "a=b&c=d", "x=1&x=2", "=", "%26=%3D"}
	for range 2000 {
		path := "/"
		for range rng.IntN(5) {
			path += pieces[rng.IntN(len(pieces))]
			if rng.IntN(3) == 0 {
				path += "/"
			}
		}
		target := path
		switch rng.IntN(3) {
		case 1:
			target += "?" + qpieces[rng.IntN(len(qpieces))]
		case 2:
			target += "?"
		}
		r := httptest.NewRequest(http.MethodPost, "http://h"+target, nil)
		r.RequestURI = target
		if rng.IntN(4) == 0 {
			r.RequestURI = "http://h" + target // absolute-form, as a proxy sends
		}
		p, q := requestTarget(r)
		if p != r.URL.EscapedPath() || q != r.URL.RawQuery {
			t.Fatalf("%q: target (%q, %q), r.URL says (%q, %q)", r.RequestURI, p, q, r.URL.EscapedPath(), r.URL.RawQuery)
		}
		var seen [2]string
		http.StripPrefix("/v1", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			seen[0], seen[1] = requestTarget(r)
		})).ServeHTTP(httptest.NewRecorder(), withTarget(r, "/v1"+target))
		if seen[0] != "/v1"+p || seen[1] != q {
			t.Fatalf("%q behind StripPrefix: target (%q, %q), want (%q, %q)", "/v1"+target, seen[0], seen[1], "/v1"+p, q)
		}
	}
}

// withTarget is r as a server would have read it with target as its
// request line's target.
func withTarget(r *http.Request, target string) *http.Request {
	r2 := httptest.NewRequest(r.Method, "http://h"+target, nil)
	r2.RequestURI = target
	return r2
}
