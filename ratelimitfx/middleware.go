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
			if route, routed := routeOf(r); !named && routed {
				rr.Name = l.counterName(r, route)
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

// routeOf is the request's chi route pattern, or "" before routing
// (middleware mounted with r.Use on the root router). The raw path is never
// used: a client could vary it to get a fresh counter on every request.
//
// Middleware that r.Use puts in a r.Route group runs before the group has
// routed, when the pattern is still the group's "/api/*"; the router is
// then asked for the whole pattern, so that each route of the group counts
// separately. A path that matches no route of the group (for the
// request's method) keeps the group's pattern, and routed is false: every
// unmatched path shares one counter, whatever the method, since a client
// may send any token as one.
func routeOf(r *http.Request) (route string, routed bool) {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return "", false
	}
	pattern := rc.RoutePattern()
	if !strings.HasSuffix(pattern, "*") || rc.Routes == nil {
		return pattern, pattern != "" // "" before routing; else routed to the endpoint
	}
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if full := rc.Routes.Find(chi.NewRouteContext(), r.Method, path); full != "" {
		return full, true
	}
	return pattern, false
}

// anyMethod is what counterName tries to learn whether a route takes every
// method.
var anyMethod = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace}

// counterName names an unnamed rule's counter after the route: "POST
// /payments" for a route of one method, and the bare pattern for a route
// the router takes for every method (Handle, HandleFunc), so that a client
// cannot multiply its limit by switching methods. The answer is cached per
// pattern: the routes are fixed once the app serves.
func (l *Limiter) counterName(r *http.Request, route string) string {
	v, ok := l.everyMethod.Load(route)
	if !ok {
		v, _ = l.everyMethod.LoadOrStore(route, routesEveryMethod(r, route))
	}
	if every, _ := v.(bool); every {
		return route
	}
	return r.Method + " " + route
}

// routesEveryMethod reports whether the router takes r's path to route
// for each method of anyMethod.
func routesEveryMethod(r *http.Request, route string) bool {
	rc := chi.RouteContext(r.Context())
	if rc == nil || rc.Routes == nil {
		return false
	}
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	for _, m := range anyMethod {
		if rc.Routes.Find(chi.NewRouteContext(), m, path) != route {
			return false
		}
	}
	return true
}
