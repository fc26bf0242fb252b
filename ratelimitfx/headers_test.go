package ratelimitfx

import (
	"math"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/redisfx/redisfx/internal/redistest"
)

// Issue 18, item 8: the answers carry the RateLimit-Policy and RateLimit
// structured fields of draft-ietf-httpapi-ratelimit-headers-11, byte for
// byte: a policy item per rule, named by the rule (or by what an unnamed
// rule allows), q and w in RateLimit-Policy (§3.1), r and t in RateLimit
// (§4.1), t agreeing with Retry-After on a 429 (§6).
func TestHeaders_Draft11StructuredFields(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	ok := func(http.ResponseWriter, *http.Request) {}
	r := chi.NewRouter()
	r.With(l.Limit(Rule{Limit: 2, Window: time.Minute})).Get("/unnamed", ok)
	r.With(l.Limit(Rule{Name: `pay "eu"\x`, Limit: 3, Window: 1500 * time.Millisecond})).Get("/named", ok)
	r.With(l.Limit(Rule{Name: "café", Limit: 3, Window: time.Hour})).Get("/unicode", ok)
	r.With(l.Limit(Rule{Limit: 100, Window: time.Hour}), l.Limit(Rule{Limit: 3, Window: 5 * time.Second})).Get("/two", ok)

	// A window's first request sees the whole window: t is exact.
	first := get(r, "/unnamed")
	wantHeaders(t, "first", first.Header(), map[string]string{
		"RateLimit-Policy": `"2-per-1m";q=2;w=60`, "RateLimit": `"2-per-1m";r=1;t=60`,
	})
	// Later in the window, t counts down (by how much depends on the machine).
	second := get(r, "/unnamed")
	if m := regexp.MustCompile(`^"2-per-1m";r=0;t=([0-9]+)$`).FindStringSubmatch(second.Header().Get("RateLimit")); m == nil {
		t.Errorf("second: RateLimit %q", second.Header().Get("RateLimit"))
	} else if secs, _ := strconv.Atoi(m[1]); secs < 1 || secs > 60 {
		t.Errorf("second: t=%d, want 1..60", secs)
	}
	refused := get(r, "/unnamed")
	if refused.Code != 429 {
		t.Fatalf("third: %d", refused.Code)
	}
	wantHeaders(t, "429", refused.Header(), headers429Of(refused.Header(), "2-per-1m", 2, 60))

	for _, tc := range []struct{ path, policy, limit string }{
		// Quotes and backslashes escaped; w and t rounded up to whole seconds.
		{"/named", `"pay \"eu\"\\x";q=3;w=2`, `"pay \"eu\"\\x";r=2;t=2`},
		// Bytes a structured-field String cannot hold become '_'.
		{"/unicode", `"caf__";q=3;w=3600`, `"caf__";r=2;t=3600`},
		// Two rules on one route: one List item each, in the order they run.
		{"/two", `"100-per-1h";q=100;w=3600, "3-per-5s";q=3;w=5`, `"100-per-1h";r=99;t=3600, "3-per-5s";r=2;t=5`},
	} {
		w := get(r, tc.path)
		wantHeaders(t, tc.path, w.Header(), map[string]string{"RateLimit-Policy": tc.policy, "RateLimit": tc.limit})
	}
}

// headers429Of are the exact fields of a 429 of the unnamed policy name
// with limit q per w seconds.
func headers429Of(h http.Header, name string, q, w int) map[string]string {
	retry := h.Get("Retry-After")
	return map[string]string{
		"Content-Type": "application/problem+json", "Cache-Control": "no-store", "Retry-After": retry,
		"RateLimit-Policy": `"` + name + `";q=` + strconv.Itoa(q) + ";w=" + strconv.Itoa(w),
		"RateLimit":        `"` + name + `";r=0;t=` + retry,
	}
}

// LegacyHeaders adds the three fields of the older drafts; DisableHeaders
// drops the fields from answers that pass, never from a 429.
func TestHeaders_LegacyAndDisabled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	legacy := newLimiter(t, srv, Config{LegacyHeaders: true})
	quiet := newLimiter(t, srv, Config{DisableHeaders: true})
	r := chi.NewRouter()
	r.With(legacy.Limit(Rule{Limit: 2, Window: time.Minute})).Get("/legacy", func(http.ResponseWriter, *http.Request) {})
	r.With(quiet.Limit(Rule{Limit: 1, Window: time.Minute})).Get("/quiet", func(http.ResponseWriter, *http.Request) {})

	wantHeaders(t, "legacy", get(r, "/legacy").Header(), map[string]string{
		"RateLimit-Policy": `"2-per-1m";q=2;w=60`, "RateLimit": `"2-per-1m";r=1;t=60`,
		"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "60",
	})
	wantHeaders(t, "quiet, passing", get(r, "/quiet").Header(), map[string]string{})
	refused := get(r, "/quiet")
	wantHeaders(t, "quiet, 429", refused.Header(), headers429Of(refused.Header(), "1-per-1m", 1, 60))
}

// sfStringSyntax is the sf-string of RFC 9651 §3.3.3.
var sfStringSyntax = regexp.MustCompile(`^"([\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"$`)

// Whatever a rule is named, its policy name is a valid structured-field
// String (a malformed one makes clients ignore the whole field, §7).
func TestHeaders_AnyNameIsAValidString(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b := make([]byte, rng.IntN(20))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		if s := sfString(string(b)); !sfStringSyntax.MatchString(s) {
			t.Fatalf("name %q: %q is not an sf-string", b, s)
		}
	}
}

// A window near the largest Duration (whole milliseconds just under it)
// wrapped when rounded up to seconds: w, t and Retry-After were
// -9223372035. It rounds up right.
func TestHeaders_LargestWindowRoundsUpWithoutWrapping(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, redistest.Start(t), Config{})
	window := time.Duration(math.MaxInt64)/time.Millisecond*time.Millisecond - time.Millisecond
	r := chi.NewRouter()
	r.With(l.Limit(Rule{Name: "huge", Limit: 1, Window: window})).Get("/x", func(http.ResponseWriter, *http.Request) {})
	get(r, "/x")
	w := get(r, "/x")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429", w.Code)
	}
	const secs = "9223372037" // 9223372036.853s rounded up
	if got := w.Header().Get("RateLimit-Policy"); got != `"huge";q=1;w=`+secs {
		t.Errorf("RateLimit-Policy %q, want w=%s", got, secs)
	}
	ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
	if err != nil || ra <= 0 || ra > 9223372037 {
		t.Errorf("Retry-After %q, want between 1 and %s", w.Header().Get("Retry-After"), secs)
	}
	if got := w.Header().Get("RateLimit"); !strings.Contains(got, ";t="+strconv.FormatInt(ra, 10)) {
		t.Errorf("RateLimit %q, want t equal to Retry-After %d", got, ra)
	}
}
