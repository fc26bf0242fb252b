package ratelimitfx

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Limit is chi middleware enforcing rule on the routes it wraps:
//
//	r.With(limiter.Limit(ratelimitfx.Rule{Limit: 10, Window: time.Minute})).Post("/payments", h)
//
// Each answer carries the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11 (see Config.LegacyHeaders for the
// older three). A request over the limit gets 429 application/problem+json
// with Retry-After and never reaches the handler.
//
// Without a Name, the rule's counters are named after the route ("POST
// /payments") when the middleware runs after routing (r.With, or r.Use
// inside a r.Route group), so one Rule value may guard several routes
// separately; mounted before routing (r.Use on the root router) it has one
// counter per key for every route ("default").
//
// A rule whose Window is not whole milliseconds makes Limit panic with a
// *redisfx.ConfigError naming Rule.Window, as chi panics on a malformed
// route: routes are set up at start-up, where the mistake shows at once,
// rather than at every request.
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
				rr.Name = route // a group's path that matches none of its routes, whatever the method
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

// routing is where chi routes a request from the middleware's place on:
// the router that routes the rest of its path, that path, and the method
// chi routes by.
type routing struct {
	router chi.Routes
	path   string
	method string
	mounts []string // the patterns of the mount points passed, each ending in "/*"
}

// routeOf is the request's chi route pattern, or "" before routing
// (middleware mounted with r.Use on the root router). The raw path is never
// used: a client could vary it to get a fresh counter on every request.
//
// Middleware that r.Use puts in a r.Route group runs before the group has
// routed, when the pattern is still the group's "/api/*"; the group's
// router is then asked, as chi will route it, for the route the request
// takes, so that each route of the group counts separately. A path that
// matches no route of the group (for the request's method) keeps the
// group's pattern, and routed is false: every unmatched path shares one
// counter, whatever the method, since a client may send any token as one.
func (l *Limiter) routeOf(r *http.Request) (route string, routed bool, at routing) {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return "", false, routing{}
	}
	pattern := rc.RoutePattern()
	if !strings.HasSuffix(pattern, "*") || rc.Routes == nil {
		if pattern == "" {
			return "", false, routing{} // before routing
		}
		// Routed to the endpoint: its router is the one past every
		// pattern but the endpoint's own (nil if not found: the counter is
		// then named after the method).
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

// routingAt is the routing of r past the mount points mounts (a prefix of
// rc.RoutePatterns): the root router and the path it routes when mounts is
// empty, else the router mounted there (found by pattern in its parent's
// Routes(), cached: routes are fixed once the app serves) and rc.RoutePath,
// which the mount set to the rest of the path as chi routes it, after a
// middleware such as chi's StripSlashes or CleanPath rewrote it (the
// request's own path, /api/orders/, would match no route, and the client
// would get the group's unmatched counter on top of the route's). The
// method is rc.RouteMethod, which chi's GetHead sets to GET for a HEAD
// request that no HEAD route takes, else the request's.
func (l *Limiter) routingAt(r *http.Request, rc *chi.Context, mounts []string) (routing, bool) {
	at := routing{router: rc.Routes, path: rc.RoutePath, method: rc.RouteMethod, mounts: mounts}
	if at.method == "" {
		at.method = r.Method
	}
	if len(mounts) == 0 {
		if at.path == "" {
			at.path = r.URL.RawPath
			if at.path == "" {
				at.path = r.URL.Path
			}
		}
		return at, true
	}
	// Keyed by the root router too: one Limiter may serve several routers
	// whose groups share mount patterns (helper-79: a second router's
	// requests were named after the first one's routes).
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

// anyMethod is what counterName tries to learn whether a route takes every
// method.
var anyMethod = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace}

// counterName names an unnamed rule's counter after the route: "POST
// /payments" for a route of one method (the method chi routes by: GET for
// a HEAD that chi's GetHead sends to a GET route), and the bare pattern for
// a route the router takes for every method (Handle, HandleFunc), so that a
// client cannot multiply its limit by switching methods. The answer is
// cached per pattern: the routes are fixed once the app serves.
func (l *Limiter) counterName(route string, at routing) string {
	if at.router == nil {
		return at.method + " " + route
	}
	key := everyMethodKey{router: at.router, route: route} // per router: one Limiter may serve several (helper-80)
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
