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

func notFound(w http.ResponseWriter, r *http.Request) {
	markUnmatched(r)
	NewProblem(http.StatusNotFound, CodeNotFound, "No route matches "+r.URL.Path+".").Write(w)
}

// methodNotAllowed answers 405 problem+json with the Allow header (RFC 9110
// §15.5.6), found on one flat router of every route, sub-routers' included
// (chi's Match takes a mount point for a route of every method), built at
// the first 405.
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
		path := cmp.Or(r.URL.RawPath, r.URL.Path) // as chi routes it
		var allowed []string
		for _, m := range methods {
			if flat.Match(chi.NewRouteContext(), m, path) {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) == 0 {
			// chi sends an unknown method here whatever the path.
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
