package idempotencyfx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/internal/throttle"
)

// Service is the idempotency engine. The HTTP middleware (Idempotent) uses
// it, and so can work that is not HTTP, such as a message consumer:
//
//	out, replayed, err := svc.Do(ctx, msg.ID, fingerprint, func(ctx context.Context) ([]byte, error) {
//		return chargeCard(ctx, msg)
//	})
type Service struct {
	cfg    *settings
	store  store
	notify *notifier
	log    *zap.Logger
	obs    *observer
	errors *httpfx.Errors

	ownerPrefix string
	ownerSeq    atomic.Uint64
	failOpenLog throttle.Every // the fail-open warning, at most every 10s
}

// New builds a Service on a Redis client, without Fx. Options add a logger,
// tracing, metrics and the HTTP error chain.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Service, error) {
	st, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.log == nil {
		o.log = zap.NewNop()
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	s := &Service{
		failOpenLog: throttle.Every{Interval: 10 * time.Second},
		cfg:         st,
		store:       store{rdb: rdb, acks: st.ReplicaAcks, ackTimeout: st.ReplicaAckTimeout},
		notify:      newNotifier(rdb, o.log),
		log:         o.log,
		ownerPrefix: hex.EncodeToString(id[:]) + ":",
	}
	s.obs, err = newObserver(o.registerer, o.tracer)
	if err != nil {
		return nil, err
	}
	s.errors = o.errors
	if s.errors == nil {
		s.errors = httpfx.NewErrors(o.log, httpfx.RegisteredErrorFilter{Name: "idempotency", Filter: httpfx.ErrorFilter(DefaultErrorFilter)})
	}
	return s, nil
}

// Start preloads the scripts (so the first request pays no SCRIPT LOAD) and
// warns about records that never expire.
func (s *Service) Start(ctx context.Context) error {
	if s.cfg.DefaultTTL == 0 {
		s.log.Warn("idempotency: DefaultTTL is 0, so completed records never expire and accumulate in Redis; set a TTL (payments: 24-48h)")
	}
	if err := scripts.Preload(ctx, s.store.rdb, idemscript.All...); err != nil {
		s.log.Warn("idempotency: could not preload a script; it will be loaded on first use", zap.Error(err))
	}
	return nil
}

// Close stops the completion subscription. In-flight requests should be
// drained first (httpfx stops the server before this runs).
func (s *Service) Close() error {
	s.notify.close()
	return nil
}

// Config returns the effective configuration, defaults applied.
func (s *Service) Config() Config { return s.cfg.Config }

// StoreKey returns the Redis key of an idempotency key, in a scope ("" for none):
// KeyPrefix + key, or KeyPrefix + escaped scope + ":" + key. The scope is
// query-escaped, so it contains no ':' and two scopes can never collide.
func (s *Service) StoreKey(scope, key string) string {
	if scope == "" {
		return s.cfg.KeyPrefix + key
	}
	return s.cfg.KeyPrefix + url.QueryEscape(scope) + ":" + key
}

func (s *Service) newOwner() string {
	return s.ownerPrefix + strconv.FormatUint(s.ownerSeq.Add(1), 36)
}

// grant is the result of acquire: either a lease (run the work) or a
// recorded response to replay.
type grant struct {
	outcome Outcome
	lease   *lease
	resp    string // encoded response, for a replay
}

// acquire claims the record of storeKey for fingerprint fp, waiting for an
// in-flight duplicate if there is one. Errors are the idempotency errors,
// a store error (*IdempotencyStoreError), or the context's error.
func (s *Service) acquire(ctx context.Context, storeKey, key, fp string) (grant, error) {
	owner := s.newOwner()
	waiting := s.cfg.WaitTimeout > 0
	c, err := s.claimOnce(ctx, storeKey, fp, owner, waiting)
	if err != nil {
		return grant{}, err
	}
	if c.kind != 'p' {
		return s.grantFor(c, storeKey, key, owner, false)
	}
	if !waiting {
		return grant{outcome: OutcomeInProgress}, newTimeout(key, c.wait)
	}
	return s.wait(ctx, storeKey, key, fp, owner)
}

func (s *Service) claimOnce(ctx context.Context, storeKey, fp, owner string, waiting bool) (claim, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	c, unreplicated, err := s.store.claim(cctx, storeKey, fp, owner, s.cfg.LockTimeout, waiting)
	cancel()
	if unreplicated {
		s.obs.outcome(ctx, OutcomeUnreplicated)
	}
	if err != nil {
		if ctx.Err() != nil {
			return claim{}, ctx.Err()
		}
		return claim{}, newStoreError(err)
	}
	return c, nil
}

// wait waits for the in-flight request of storeKey: woken by its completion
// message, or by a slow fallback poll (which also notices an owner whose
// lease ran out, and takes over). It gives up with 409 after WaitTimeout,
// and at once when ctx ends (the client went away).
func (s *Service) wait(ctx context.Context, storeKey, key, fp, owner string) (grant, error) {
	began := time.Now()
	ctx, span := s.obs.startWait(ctx)
	deadline := time.NewTimer(s.cfg.WaitTimeout)
	defer deadline.Stop()
	sig, release := s.notify.watch(ctx, storeKey)
	defer release()
	g, err := func() (grant, error) {
		poll := time.NewTimer(0) // re-claim at once: the subscription is now in place
		defer poll.Stop()
		leaseLeft := s.cfg.LockTimeout // what the last claim said is left of the owner's lease
		for {
			select {
			case <-sig.fired:
				return s.grantFromMessage(sig.payload, key)
			case <-poll.C:
				c, err := s.claimOnce(ctx, storeKey, fp, owner, true)
				if err != nil {
					return grant{}, err
				}
				if c.kind != 'p' {
					return s.grantFor(c, storeKey, key, owner, true)
				}
				leaseLeft = c.wait
				poll.Reset(min(s.cfg.PollInterval, max(c.wait, time.Millisecond)))
			case <-deadline.C:
				// Retry after the owner's lease at the latest: by then it has
				// finished, or its key can be taken over.
				return grant{outcome: OutcomeInProgress}, newTimeout(key, leaseLeft)
			case <-ctx.Done():
				return grant{}, ctx.Err()
			}
		}
	}()
	s.obs.waited(ctx, span, time.Since(began), err)
	return g, err
}

// grantFor turns a claim reply into a grant or an error.
func (s *Service) grantFor(c claim, storeKey, key, owner string, waited bool) (grant, error) {
	switch c.kind {
	case 'n':
		return grant{outcome: OutcomeNew, lease: s.newLease(storeKey, owner, c.token)}, nil
	case 't':
		return grant{outcome: OutcomeTakeover, lease: s.newLease(storeKey, owner, c.token)}, nil
	case 'c':
		return grant{outcome: replayOutcome(waited), resp: c.resp}, nil
	case 'f':
		return grant{outcome: OutcomePreviousFailed}, newFailed(key, c.wait)
	case 'u':
		return grant{outcome: OutcomeNotReplayable}, newNotReplayable(key, c.wait)
	case 'm':
		return grant{outcome: OutcomeMismatch}, newMismatch(key)
	}
	return grant{}, newStoreError(fmt.Errorf("unexpected claim reply %q", c.kind))
}

// grantFromMessage reads a completion message: state byte + response.
func (s *Service) grantFromMessage(payload, key string) (grant, error) {
	if payload == "" {
		return grant{}, newStoreError(errors.New("empty completion message"))
	}
	switch State(payload[:1]) {
	case StateCompleted:
		return grant{outcome: OutcomeWaitedReplay, resp: payload[1:]}, nil
	case StateFailed:
		return grant{outcome: OutcomePreviousFailed}, newFailed(key, s.cfg.LockTimeout)
	default:
		return grant{outcome: OutcomeNotReplayable}, newNotReplayable(key, s.cfg.DefaultTTL)
	}
}

func replayOutcome(waited bool) Outcome {
	if waited {
		return OutcomeWaitedReplay
	}
	return OutcomeReplay
}

// finish records the outcome of owned work. It reports a stale owner (the
// lease was taken over) and store failures in the log and metrics; the
// caller's response is not affected.
func (s *Service) finish(ctx context.Context, l *lease, state State, resp []byte) {
	ttl := s.cfg.DefaultTTL
	if state == StateFailed {
		ttl = s.cfg.LockTimeout
	}
	owned, err := l.complete(ctx, state, resp, ttl)
	switch {
	case err != nil:
		s.obs.outcome(ctx, OutcomeStoreError)
		s.log.Error("idempotency: the outcome could not be recorded; a retry may run the handler again after the lease expires",
			zap.String("record", l.key), zap.Error(err))
	case !owned:
		s.obs.outcome(ctx, OutcomeStaleOwner)
		s.log.Warn("idempotency: the lease was taken over while the handler ran; this outcome was not recorded",
			zap.String("record", l.key), zap.Int64("fencing_token", l.token))
	}
}

// warnFailOpen logs that a request runs unprotected, at most every 10s.
func (s *Service) warnFailOpen(err error) {
	if !s.failOpenLog.Allow() {
		return
	}
	s.log.Warn("idempotency: store unavailable, running the handler WITHOUT idempotency protection (fail-open)", zap.Error(err))
}

type fenceKey struct{}

// FencingToken returns the fencing token of the idempotent work running in
// ctx: 1 for the first attempt at a key, and one more at each takeover of an
// abandoned attempt. Pass it to downstream writes so that they can refuse a
// stale attempt. It is 0 outside idempotent work.
func FencingToken(ctx context.Context) int64 {
	t, _ := ctx.Value(fenceKey{}).(int64)
	return t
}
