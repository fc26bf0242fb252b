package idempotencyfx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"

	"go.uber.org/zap"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
)

type serviceKey struct{}

// Install makes the Service reachable from Idempotent() routes on a router
// of your own: r.Use(svc.Install). Module does it for httpfx's router.
func (s *Service) Install(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serviceKey{}, s)))
	})
}

// Idempotent marks a route as idempotent: it runs its handler once per
// idempotency key. It takes no arguments (the configuration is the
// module's); bound twice on one route, it engages once.
func Idempotent() func(http.Handler) http.Handler {
	return idempotent(false)
}

// IdempotentRequired is Idempotent for a route that must have a key: a
// request without one gets 400 idempotency_key_required.
func IdempotentRequired() func(http.Handler) http.Handler {
	return idempotent(true)
}

func idempotent(required bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s, _ := r.Context().Value(serviceKey{}).(*Service)
			if s == nil {
				httpfx.NewProblem(http.StatusInternalServerError, "idempotency_not_installed",
					"idempotencyfx.Idempotent() is used on this route, but idempotencyfx.Module is not in the app "+
						"(or, on a router of your own, Service.Install is not in its middleware)").Write(w)
				return
			}
			s.serveHTTP(w, r, next, required)
		})
	}
}

// serveHTTP is the idempotency protocol for one request.
func (s *Service) serveHTTP(w http.ResponseWriter, r *http.Request, next http.Handler, required bool) {
	ctx := r.Context()
	key, present, err := keyFromRequest(r, s.cfg.header)
	if err != nil {
		s.obs.outcome(ctx, OutcomeInvalidKey)
		s.errors.Render(w, r, err)
		return
	}
	if !present {
		if required || s.cfg.RequireKey {
			s.obs.outcome(ctx, OutcomeKeyRequired)
			s.errors.Render(w, r, &IdempotencyKeyRequiredError{Header: s.cfg.HeaderName,
				BaseError: redisfx.BaseError{Code: CodeKeyRequired, Message: "this route requires an " + s.cfg.HeaderName + " header"}})
			return
		}
		s.obs.outcome(ctx, OutcomeBypass)
		next.ServeHTTP(w, r)
		return
	}
	body, err := readBody(r, s.cfg.MaxBodyBytes)
	var fp, scope string
	if err == nil {
		fp, err = s.cfg.FingerprintGenerator(r, body)
	}
	if err == nil && s.cfg.Scope != nil {
		scope, err = s.cfg.Scope(r)
	}
	if err != nil {
		s.errors.Render(w, r, err)
		return
	}
	record := s.StoreKey(scope, key)
	if s.holdsRecord(ctx, record) { // engaged further out: see leaseMark
		next.ServeHTTP(w, r)
		return
	}
	g, err := s.acquire(ctx, record, key, fp)
	if err != nil {
		s.refuse(w, r, next, g, err)
		return
	}
	if g.lease == nil {
		rp, err := decodeRecord(g.resp)
		if err != nil {
			s.obs.outcome(ctx, OutcomeStoreError)
			s.errors.Render(w, r, newStoreError(err))
			return
		}
		s.obs.outcome(ctx, g.outcome)
		rp.write(w)
		return
	}
	s.obs.outcome(ctx, g.outcome)
	s.runOwned(w, r, next, g.lease)
}

// refuse answers a request that may not run (or runs it, fail-open).
func (s *Service) refuse(w http.ResponseWriter, r *http.Request, next http.Handler, g grant, err error) {
	ctx := r.Context()
	var storeErr *IdempotencyStoreError
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		w.WriteHeader(httpfx.StatusClientClosedRequest) // the client went away while we waited; for the log and metrics
		return
	case errors.As(err, &storeErr):
		if s.cfg.ErrorPolicy == FailOpen {
			s.obs.outcome(ctx, OutcomeFailOpen)
			if s.failOpenLog.Allow() {
				s.log.Warn("idempotency: store unavailable, running the handler WITHOUT idempotency protection (fail-open)", zap.Error(storeErr.Err))
			}
			next.ServeHTTP(w, r)
			return
		}
		s.obs.outcome(ctx, OutcomeStoreError)
		if s.refusedLog.Allow() { // Redis down: every request comes here, and the counter counts them
			s.log.Error("idempotency: store unavailable; request refused (fail-closed)", zap.Error(storeErr.Err))
		}
	case g.outcome != "":
		s.obs.outcome(ctx, g.outcome)
	}
	s.errors.Render(w, r, err)
}

// runOwned runs the handler under the lease, records its outcome, then
// sends the response. A panic or runtime.Goexit records a failure.
func (s *Service) runOwned(w http.ResponseWriter, r *http.Request, next http.Handler, l *lease) {
	rec := &recorder{w: w, limit: s.cfg.MaxResponseBytes, header: w.Header()}
	outer := outerHeaders(rec.header)
	ctx := context.WithValue(r.Context(), fenceKey{}, newLeaseMark(r.Context(), l))
	returned := false
	defer func() {
		if returned {
			return
		}
		panicked := recover() // nil: runtime.Goexit, which goes on after this
		s.finish(ctx, l, failedUnlessAnswered(rec), nil)
		if panicked != nil {
			clear(rec.header) // the recovery middleware answers with the outer middleware's headers only
			maps.Copy(rec.header, outer)
			panic(panicked)
		}
	}()
	next.ServeHTTP(rec, r.WithContext(ctx))
	l.ended.Store(true)
	returned = true

	state := StateCompleted
	var blob []byte
	switch {
	case rec.failed || rec.retryLater || failureStatus(rec.finishedStatus()):
		state = failedUnlessAnswered(rec)
	case !rec.passing:
		var ok bool
		if blob, ok = encodeResponse(rec.finishedStatus(), handlerHeaders(rec.header, outer), s.cfg.skip, rec.body); !ok {
			rec.reason = "headers and body larger than a record can hold"
		}
	}
	if state != StateFailed && blob == nil {
		state = StateNotReplayable
		s.log.Info("idempotency: response not recorded; retries of this key get 409 " + CodeResponseNotStored + " (" + rec.reason + ")")
	}
	s.finish(ctx, l, state, blob)
	rec.send()
}

// failedUnlessAnswered is the outcome of a handler that failed: StateFailed,
// unless part of a non-failure answer already reached the client, who may
// have acted on it.
func failedUnlessAnswered(rec *recorder) State {
	if rec.passing && !failureStatus(rec.finishedStatus()) {
		return StateNotReplayable
	}
	return StateFailed
}

// readBody reads the whole request body, at most limit bytes, and restores
// it for the handler. The first buffer is sized by Content-Length up to 4 KiB
// only, so a lying length costs little.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, bodyTooLarge(limit)
	}
	body := make([]byte, 0, min(max(r.ContentLength, 0)+1, 4<<10))
	for {
		if len(body) == cap(body) {
			body = slices.Grow(body, len(body))
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if int64(len(body)) > limit {
			return nil, bodyTooLarge(limit)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, &httpfx.ProblemError{Problem: httpfx.NewProblem(http.StatusBadRequest, "body_unreadable", "the request body could not be read")}
		}
	}
	rb := new(restoredBody)
	rb.Reset(body)
	r.Body = rb
	return body, nil
}

// restoredBody gives the handler the body the fingerprint read.
type restoredBody struct{ bytes.Reader }

// Close implements io.Closer; there is nothing to close.
func (*restoredBody) Close() error { return nil }

func bodyTooLarge(limit int64) error {
	return &IdempotencyBodyTooLargeError{Limit: limit, BaseError: redisfx.BaseError{Code: CodeBodyTooLarge,
		Message: "the request body is larger than the idempotency layer accepts"}}
}

// outerHeaders notes the response headers outer middleware set before the
// handler ran (a request id): a replay does not repeat them, an answer after
// a panic keeps them. handlerHeaders compares their value slices.
func outerHeaders(h http.Header) http.Header {
	if len(h) == 0 {
		return nil
	}
	seen := make(http.Header, len(h))
	for k, vs := range h {
		if len(vs) > 0 {
			seen[k] = vs
		}
	}
	return seen
}

// handlerHeaders is h without the headers that outer middleware set and
// the handler left unchanged.
func handlerHeaders(h, outer http.Header) http.Header {
	if len(outer) == 0 {
		return h
	}
	own := make(http.Header, len(h))
	for k, vs := range h {
		if o, ok := outer[k]; ok && len(vs) == len(o) && &vs[0] == &o[0] {
			continue
		}
		own[k] = vs
	}
	return own
}
