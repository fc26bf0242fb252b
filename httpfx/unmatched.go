package httpfx

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
)

// Codes of the problems the router answers for requests no route serves.
const (
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
)

// notFound answers a path no route matches: 404 problem+json.
func notFound(w http.ResponseWriter, r *http.Request) {
	markUnmatched(r)
	NewProblem(http.StatusNotFound, CodeNotFound, "No route matches "+r.URL.Path+".").Write(w)
}

// methodNotAllowed answers a path that routes only other methods: 405
// problem+json with the Allow header RFC 9110 §15.5.6 requires. chi sets
// Allow only in its own default handler (which answers an empty body), so
// the methods are found here: every route of the router, sub-routers
// included, is put on one flat router, which matches exactly (chi's Match
// on the nested router takes a sub-router's mount point for a route of
// every method). The flat router is built at the first 405, when the app
// has started and its routes are registered.
func methodNotAllowed(routes chi.Routes) http.HandlerFunc {
	var (
		once    sync.Once
		flat    *chi.Mux
		methods []string
	)
	build := func() {
		flat = chi.NewRouter()
		noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		_ = chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			flat.Method(method, route, noop)
			if !slices.Contains(methods, method) {
				methods = append(methods, method)
			}
			return nil
		})
		slices.SortFunc(methods, func(a, b string) int { return cmp.Or(methodRank(a)-methodRank(b), strings.Compare(a, b)) })
	}
	return func(w http.ResponseWriter, r *http.Request) {
		markUnmatched(r)
		once.Do(build)
		path := r.URL.RawPath // as chi routes it
		if path == "" {
			path = r.URL.Path
		}
		var allowed []string
		for _, m := range methods {
			if flat.Match(chi.NewRouteContext(), m, path) {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) == 0 {
			// chi sends a method it does not know here whatever the path:
			// a path no route serves is a 404 for every method.
			notFound(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		NewProblem(http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path+".").Write(w)
	}
}

// methodRank orders Allow as RFC 9110 lists the methods; others after.
func methodRank(m string) int {
	if i := slices.Index([]string{
		http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch,
	}, m); i >= 0 {
		return i
	}
	return 100
}
