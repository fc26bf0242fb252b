package ratelimitfx

import (
	"cmp"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Limit is chi middleware enforcing rule on the routes it wraps:
//
//	r.With(limiter.Limit(ratelimitfx.Rule{Limit: 10, Window: time.Minute})).Post("/payments", h)
//
// A request over the limit gets 429 and never reaches the handler. An
// unnamed rule's counters are named after the route when it runs after
// routing (docs/rate-limit.md, "Keys and rules"). An invalid rule panics
// with a *redisfx.ConfigError, as chi does on a bad route.
func (l *Limiter) Limit(rule Rule) func(http.Handler) http.Handler {
	named := rule.Name != ""
	rule = l.withDefaults(rule)
	if err := validRule(rule); err != nil {
		panic(err)
	}
	p := newPolicy(rule, named)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := rule.Key(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			rr := rule
			if route, routed, at := l.routeOf(r); !named && routed {
				rr.Name = l.counterName(route, at)
			} else if !named && route != "" {
				rr.Name = route // unmatched in a group, whatever the method
			}
			d, err := l.Check(r.Context(), rr, key)
			if err != nil {
				if d.Allowed {
					next.ServeHTTP(w, r) // fail-open
					return
				}
				l.errors.Render(w, r, err) // fail-closed: 503
				return
			}
			if !d.Allowed || !l.cfg.DisableHeaders {
				l.setHeaders(w.Header(), p, d)
			}
			if !d.Allowed {
				l.errors.Render(w, r, newExceededError(d))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Handler is Limit with the Config's default rule (keyed by client IP).
func (l *Limiter) Handler(next http.Handler) http.Handler { return l.Limit(Rule{})(next) }

// routing is where chi routes a request from the middleware's place on.
type routing struct {
	router chi.Routes
	path   string
	method string
	mounts []string // the patterns of the mount points passed, each ending in "/*"
}

// routeOf is the request's chi route pattern ("" before routing), never
// the raw path. In a r.Route group the group's router is asked for the
// route ahead; a path matching none keeps the group's pattern (routed
// false).
func (l *Limiter) routeOf(r *http.Request) (route string, routed bool, at routing) {
	rc := chi.RouteContext(r.Context())
	pattern := rc.RoutePattern() // nil-safe
	if pattern == "" {
		return "", false, routing{} // before routing, or outside chi
	}
	if !strings.HasSuffix(pattern, "*") || rc.Routes == nil {
		// routed: the endpoint's router is past every pattern but its own
		at, _ := l.routingAt(r, rc, rc.RoutePatterns[:len(rc.RoutePatterns)-1])
		return pattern, true, at
	}
	at, ok := l.routingAt(r, rc, rc.RoutePatterns)
	if !ok {
		return pattern, false, routing{} // a catch-all endpoint ("/files/*"), not a group: no router below
	}
	rest := at.router.Find(chi.NewRouteContext(), at.method, at.path)
	if rest == "" {
		return pattern, false, routing{}
	}
	joined := chi.Context{RoutePatterns: append(append([]string(nil), at.mounts...), rest)}
	return joined.RoutePattern(), true, at
}

// routingAt is the routing of r past the mount points mounts: the router
// mounted there (cached), the path and method as chi routes them.
func (l *Limiter) routingAt(r *http.Request, rc *chi.Context, mounts []string) (routing, bool) {
	at := routing{router: rc.Routes, path: rc.RoutePath, method: cmp.Or(rc.RouteMethod, r.Method), mounts: mounts}
	if len(mounts) == 0 {
		at.path = cmp.Or(at.path, r.URL.RawPath, r.URL.Path)
		return at, true
	}
	// keyed by the root too: one Limiter may serve several routers
	key := subRouterKey{root: rc.Routes, mounts: strings.Join(mounts, "\x00")}
	if v, ok := l.subRouters.Load(key); ok {
		at.router, _ = v.(chi.Routes)
		return at, at.router != nil
	}
	router := rc.Routes
	for _, m := range mounts {
		var next chi.Routes
		for _, rt := range router.Routes() {
			if rt.Pattern == m {
				next = rt.SubRoutes
				break
			}
		}
		if next == nil {
			router = nil
			break
		}
		router = next
	}
	l.subRouters.Store(key, router)
	at.router = router
	return at, router != nil
}

// everyMethodKey names a route pattern of one router.
type everyMethodKey struct {
	router chi.Routes
	route  string
}

// subRouterKey names a router below root's mount points mounts (joined).
type subRouterKey struct {
	root   chi.Routes
	mounts string
}

// anyMethod are the methods counterName tries.
var anyMethod = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace}

// counterName names an unnamed rule's counter after the route: "POST
// /payments", or the bare pattern for a route taken for every method
// (Handle), so that switching methods does not multiply the limit.
func (l *Limiter) counterName(route string, at routing) string {
	if at.router == nil {
		return at.method + " " + route
	}
	key := everyMethodKey{router: at.router, route: route}
	v, ok := l.everyMethod.Load(key)
	if !ok {
		v, _ = l.everyMethod.LoadOrStore(key, routesEveryMethod(at))
	}
	if every, _ := v.(bool); every {
		return route
	}
	return at.method + " " + route
}

// routesEveryMethod reports whether at's router takes at's path to the
// same route for each method of anyMethod.
func routesEveryMethod(at routing) bool {
	first := ""
	for i, m := range anyMethod {
		found := at.router.Find(chi.NewRouteContext(), m, at.path)
		if found == "" || (i > 0 && found != first) {
			return false
		}
		first = found
	}
	return true
}
