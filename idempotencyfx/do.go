package idempotencyfx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Do runs fn at most once per key, for work that is not HTTP (a message
// consumer, a job). key is the idempotency key (KeyPrefix is put before it);
// fingerprint identifies the input, so that a key reused with different
// input is refused with IdempotencyFingerprintMismatchError.
//
// The first call runs fn and records its result for DefaultTTL; later calls
// with the same key return the recorded result with replayed true. A call
// made while another runs waits up to WaitTimeout. An error returned by fn
// (or a panic, which is re-raised) records a failure that lasts LockTimeout,
// during which calls get IdempotencyFailedError. Store errors are returned
// as IdempotencyStoreError whatever the ErrorPolicy: the caller decides.
func (s *Service) Do(ctx context.Context, key, fingerprint string, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	if _, err := ParseKey([]string{key}); err != nil {
		return nil, false, err
	}
	g, err := s.acquire(ctx, s.StoreKey("", key), key, fingerprint)
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
		resp, err := decodeResponse([]byte(g.resp))
		if err != nil {
			return nil, false, newStoreError(err)
		}
		return resp.Body, true, nil
	}
	l := g.lease
	defer func() {
		if p := recover(); p != nil {
			s.finish(ctx, l, StateFailed, nil)
			panic(p)
		}
	}()
	out, err := fn(context.WithValue(ctx, fenceKey{}, l.token))
	if err != nil {
		s.finish(ctx, l, StateFailed, nil)
		return nil, false, err
	}
	s.finish(ctx, l, StateCompleted, encodeResponse(http.StatusOK, nil, nil, out))
	return out, false, nil
}

// Get reads the record of an idempotency key (in a scope, "" for none); nil
// when there is none.
func (s *Service) Get(ctx context.Context, scope, key string) (*Record, error) {
	rec, err := s.store.get(ctx, s.StoreKey(scope, key))
	if err != nil {
		return nil, fmt.Errorf("idempotencyfx: get %q: %w", key, err)
	}
	return rec, nil
}

// Delete removes the record of an idempotency key: the spec's operator
// action, after which the key can be retried cleanly at once. Deleting an
// in-progress record lets a duplicate run while the first still runs; the
// first's outcome is then refused (stale owner). It reports whether a record
// existed.
func (s *Service) Delete(ctx context.Context, scope, key string) (bool, error) {
	n, err := s.store.rdb.Del(ctx, s.StoreKey(scope, key)).Result()
	if err != nil {
		return false, fmt.Errorf("idempotencyfx: delete %q: %w", key, err)
	}
	return n == 1, nil
}
