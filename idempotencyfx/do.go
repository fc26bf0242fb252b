package idempotencyfx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Do runs fn at most once per key, for work that is not HTTP, under the
// rules of Idempotent routes (docs/idempotency.md): fingerprint identifies
// the input, and later calls return the recorded result with replayed true.
// Store errors are returned whatever the ErrorPolicy. Inside the work that
// holds the same record, fn runs at once as part of that work.
func (s *Service) Do(ctx context.Context, key, fingerprint string, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	return s.DoInScope(ctx, "", key, fingerprint, fn)
}

// DoInScope is Do with the key in a scope (a tenant, a user), the record the
// middleware uses for a request of that scope.
func (s *Service) DoInScope(ctx context.Context, scope, key, fingerprint string, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	key, err = ParseKey([]string{key}) // a quoted key is the header's record: unquote it as the middleware does
	if err != nil {
		return nil, false, err
	}
	record := s.StoreKey(scope, key)
	if s.holdsRecord(ctx, record) { // served by the lease of the work it runs in
		out, err := fn(ctx)
		return out, false, err
	}
	g, err := s.acquire(ctx, record, key, fingerprint)
	if err != nil {
		if g.outcome == "" && errors.As(err, new(*IdempotencyStoreError)) {
			g.outcome = OutcomeStoreError
		}
		if g.outcome != "" {
			s.obs.outcome(ctx, g.outcome)
		}
		return nil, false, err
	}
	s.obs.outcome(ctx, g.outcome)
	if g.lease == nil {
		rp, err := decodeRecord(g.resp)
		if err != nil {
			return nil, false, newStoreError(err)
		}
		return []byte(rp.body), true, nil
	}
	return s.runDo(ctx, g.lease, fn)
}

// runDo runs fn under the lease and records its result, as runOwned does.
func (s *Service) runDo(ctx context.Context, l *lease, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		panicked := recover() // nil: runtime.Goexit, which goes on after this
		s.finish(ctx, l, StateFailed, nil)
		if panicked != nil {
			panic(panicked)
		}
	}()
	out, err := fn(context.WithValue(ctx, fenceKey{}, newLeaseMark(ctx, l)))
	l.ended.Store(true)
	returned = true
	if err != nil {
		s.finish(ctx, l, StateFailed, nil)
		return nil, false, err
	}
	blob, ok := encodeResponse(http.StatusOK, nil, nil, out)
	if !ok || len(out) > s.cfg.MaxResponseBytes {
		s.log.Info("idempotency: result larger than MaxResponseBytes not recorded; later calls with this key get " + CodeResponseNotStored)
		s.finish(ctx, l, StateNotReplayable, nil)
		return out, false, nil
	}
	s.finish(ctx, l, StateCompleted, blob)
	return out, false, nil
}

// Get reads the record of a key in a scope ("" for none); nil when there is
// none. key is as the header carries it (a quoted sf-string is unquoted) or
// unquoted; a key that itself is quoted must be passed as its header carries it.
func (s *Service) Get(ctx context.Context, scope, key string) (*Record, error) {
	rec, err := s.store.get(ctx, s.StoreKey(scope, recordKey(key)))
	if err != nil {
		return nil, fmt.Errorf("idempotencyfx: get %q: %w", key, err)
	}
	return rec, nil
}

// Delete removes the record of a key (read as Get reads it), after which the
// key can be retried at once; deleting an in-progress record lets a
// duplicate run and the first's outcome is refused. It reports whether a
// record existed.
func (s *Service) Delete(ctx context.Context, scope, key string) (bool, error) {
	n, err := s.store.rdb.Del(ctx, s.StoreKey(scope, recordKey(key))).Result()
	if err != nil {
		return false, fmt.Errorf("idempotencyfx: delete %q: %w", key, err)
	}
	return n == 1, nil
}

// recordKey is the stored key of key as given to Get or Delete.
func recordKey(key string) string {
	if parsed, err := ParseKey([]string{key}); err == nil {
		return parsed
	}
	return key
}
