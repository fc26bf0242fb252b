package idempotencyfx

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/detach"
	"github.com/redisfx/redisfx/internal/durations"
	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/internal/throttle"
	"github.com/redisfx/redisfx/plugintrace"
)

// Service is the idempotency engine behind Idempotent routes; Do offers it
// to work that is not HTTP (docs/idempotency.md, "Work that is not HTTP").
type Service struct {
	cfg    *settings
	store  store
	calls  *detach.Timeouts // StoreTimeout contexts of claims and completions
	notify *notifier
	late   *lateCompletions
	outbox *outbox // nil without streams
	log    *zap.Logger
	obs    *observer
	errors *httpfx.Errors

	flockMu sync.Mutex
	flocks  map[flockKey]*flock // duplicates waiting, by record and fingerprint

	withdrawing    atomic.Int64   // withdrawals in flight (maxWithdrawals)
	withdrawLog    throttle.Every // the too-many-withdrawals error, at most every 10s
	failOpenLog    throttle.Every // the fail-open warning, at most every 10s
	refusedLog     throttle.Every // the fail-closed error, at most every 10s
	unpublishedLog throttle.Every // the failed-notification warning, at most every 10s

	// onWaitPoll, set only by tests, runs after every poll of a waiting duplicate.
	onWaitPoll func()
}

// New builds a Service on a Redis client, without Fx. The client must
// honour context deadlines (go-redis: ContextTimeoutEnabled, which storefx
// sets), so that StoreTimeout bounds every Redis call.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Service, error) {
	st, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if err := clientcheck.HonoursDeadlines("idempotencyfx", "Config.StoreTimeout", rdb); err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.log == nil {
		o.log = zap.NewNop()
	}
	s := &Service{
		failOpenLog:    throttle.Every{Interval: 10 * time.Second},
		refusedLog:     throttle.Every{Interval: 10 * time.Second},
		unpublishedLog: throttle.Every{Interval: 10 * time.Second},
		withdrawLog:    throttle.Every{Interval: 10 * time.Second},
		cfg:            st,
		store:          newStore(rdb, st.ReplicaAcks, st.ReplicaAckTimeout),
		log:            o.log,
		late:           newLateCompletions(),
		flocks:         map[flockKey]*flock{},
		calls:          detach.New(st.StoreTimeout),
		errors:         o.errors,
	}
	s.obs, err = newObserver(o.registerer, o.tracer)
	if err != nil {
		return nil, err
	}
	s.notify = newNotifier(rdb, o.log, s.obs, st.StoreTimeout)
	if o.streams != nil {
		s.outbox = newOutbox(s, o.streams, cmp.Or(o.outboxTimings, outboxTimings{outboxPoll, outboxTakeover}))
		s.obs.box.Store(s.outbox)
	}
	if s.errors == nil {
		s.errors = httpfx.NewErrors(o.log, httpfx.RegisteredErrorFilter{Name: "idempotency", Filter: httpfx.ErrorFilter(DefaultErrorFilter)})
	}
	return s, nil
}

// Start preloads the scripts, starts the outbox's relay (WithStreams) and
// warns about settings that weaken the protection (docs/operations.md).
func (s *Service) Start(ctx context.Context) error {
	if s.outbox != nil {
		s.outbox.start()
	}
	if s.cfg.DefaultTTL == NeverExpire {
		s.log.Warn("idempotency: DefaultTTL is NeverExpire, so completed records never expire and accumulate in Redis; set a TTL (payments: 24-48h)")
	}
	if s.cfg.LockTimeout < ShortLockTimeout {
		s.log.Warn("idempotency: LockTimeout is shorter than 1s: a lease renewal delayed past a third of it "+
			"(a slow round trip, a GC pause, a loaded machine) lets a duplicate run while the handler still runs; "+
			"use such values in tests only", zap.Duration("lock_timeout", s.cfg.LockTimeout))
	}
	if err := scripts.Preload(ctx, s.store.rdb, idemscript.All...); err != nil {
		s.log.Warn("idempotency: could not preload a script; it will be loaded on first use", zap.Error(err))
	}
	ctx = plugintrace.WithoutCommandSpans(ctx) // a start-up check is not a trace
	s.checkChannels(ctx)
	s.checkEviction(ctx)
	return nil
}

// checkChannels publishes on a channel no record uses to learn whether the
// Redis user may use the channels that wake waiters (Redis 7 ACL users get
// none by default): without them waiters poll, so a warning.
func (s *Service) checkChannels(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	err := s.store.rdb.Publish(ctx, s.cfg.KeyPrefix+":", "").Err()
	if !redis.IsPermissionError(err) {
		return
	}
	s.obs.notificationFailure(notifySubscribeDenied)
	s.log.Warn("idempotency: the Redis user may not use the pub/sub channels "+s.cfg.KeyPrefix+"*, so waiting duplicates "+
		"are not woken by notification and poll every PollInterval instead. Grant them: ACL SETUSER <user> &"+
		s.cfg.KeyPrefix+"* (or allchannels, or acl-pubsub-default allchannels)", zap.Error(err))
}

// checkEviction warns when Redis may evict records (all have a TTL). INFO is
// allowed where CONFIG may not be.
func (s *Service) checkEviction(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	info, err := s.store.rdb.Info(ctx).Result()
	if err != nil {
		s.log.Debug("idempotency: could not read the maxmemory policy", zap.Error(err))
		return
	}
	field := func(name string) string {
		_, rest, _ := strings.Cut(info, "\n"+name+":")
		value, _, _ := strings.Cut(rest, "\n")
		return strings.TrimSpace(value)
	}
	maxmemory, policy := field("maxmemory"), field("maxmemory_policy")
	if maxmemory != "" && maxmemory != "0" && policy != "" && policy != "noeviction" {
		s.log.Warn("idempotency: Redis has maxmemory-policy "+policy+", which can evict idempotency records (they all have a TTL); "+
			"an evicted record lets a retry run the handler again. Use maxmemory-policy noeviction, or a dedicated Redis",
			zap.String("maxmemory", maxmemory))
	}
}

// Shutdown gives outcomes still being recorded in the background until ctx
// is done, then stops. Drain in-flight requests first (httpfx does).
func (s *Service) Shutdown(ctx context.Context) error {
	if s.outbox != nil {
		s.outbox.shutdown(ctx)
		defer s.outbox.stopped()
	}
	s.late.shutdown(ctx)
	s.notify.close()
	return nil
}

// stop is the Fx stop hook: Shutdown with a grace of at most 2×StoreTimeout
// and half of the stop deadline, leaving the rest to the hooks after it.
func (s *Service) stop(ctx context.Context) error {
	grace := durations.Mul(s.cfg.StoreTimeout, 2)
	if deadline, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(deadline)/2)
	}
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	return s.Shutdown(ctx)
}

// Close is Shutdown without the grace.
func (s *Service) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return s.Shutdown(ctx)
}

// Config returns the effective configuration, defaults applied.
func (s *Service) Config() Config { return s.cfg.Config }

// StoreKey returns the Redis key of an idempotency key in a scope ("" for
// none); no two (scope, key) pairs share one.
func (s *Service) StoreKey(scope, key string) string {
	return storeKey(s.cfg.KeyPrefix, scope, key)
}

// grant is the result of acquire: a lease (run the work) or a response to replay.
type grant struct {
	outcome Outcome
	lease   *lease
	resp    string // encoded response, for a replay
}

// acquire claims the record for fingerprint fp, waiting for an in-flight
// duplicate if there is one.
func (s *Service) acquire(ctx context.Context, storeKey, key, fp string) (grant, error) {
	owner := randid.Hex(12) // 96 random bits: no subscriber can forge a completion message for its waiters
	if s.cfg.WaitTimeout > 0 {
		return s.wait(ctx, storeKey, key, fp, owner)
	}
	c, err := s.claimOnce(ctx, storeKey, fp, owner, false)
	if err != nil {
		return grant{}, err
	}
	if c.kind != claimInProgress {
		return s.grantFor(c, storeKey, key, owner, false)
	}
	return grant{outcome: OutcomeInProgress}, newTimeout(key, c.wait)
}

// claimOnce sends one claim, which runs to its end (StoreTimeout) even if the
// client leaves: cut off, it could still land. One whose answer is lost is
// withdrawn.
func (s *Service) claimOnce(ctx context.Context, storeKey, fp, owner string, waiting bool) (claim, error) {
	if err := ctx.Err(); err != nil {
		return claim{}, err // the client has gone: claim nothing for it
	}
	c, unreplicated, err := s.store.claim(s.calls.Context(ctx), storeKey, fp, owner, s.cfg.LockTimeout, waiting)
	if unreplicated {
		s.obs.outcome(ctx, OutcomeUnreplicated)
	}
	if err != nil {
		if answerLost(err) {
			s.withdrawClaim(ctx, storeKey, owner)
		}
		if ctx.Err() != nil {
			return claim{}, ctx.Err()
		}
		return claim{}, newStoreError(err)
	}
	return c, nil
}

// wait claims as a member of the flock of the record and fp: the first
// claims at once, for itself and those that join meanwhile.
func (s *Service) wait(ctx context.Context, storeKey, key, fp, owner string) (grant, error) {
	f, first := s.join(storeKey, fp)
	defer s.leave(f)
	if first {
		c, err := s.claimOnce(ctx, storeKey, fp, owner, true)
		leased := s.settle(f, c, err, owner)
		s.handOver(f)
		if err != nil {
			return grant{}, err
		}
		if leased || c.kind != claimInProgress {
			return s.grantFor(c, storeKey, key, owner, false)
		}
	}
	began := time.Now()
	ctx, span := s.obs.startWait(ctx, s.cfg.WaitTimeout)
	g, err := s.awaitOutcome(ctx, f, storeKey, key, fp, owner)
	s.obs.waited(span, time.Since(began), g.outcome, err)
	return g, err
}

// awaitOutcome waits, as a member of f, for the outcome of the attempt that
// runs. The lead is woken by a completion message naming the owner last
// seen running, or polls: when its subscription is confirmed and every
// PollInterval. A poll also takes over a lease that ran out.
func (s *Service) awaitOutcome(ctx context.Context, f *flock, storeKey, key, fp, owner string) (grant, error) {
	deadline := time.NewTimer(s.cfg.WaitTimeout)
	defer deadline.Stop()
	poll := time.NewTimer(time.Hour)
	defer poll.Stop()
	lead := false
	defer func() {
		if lead {
			s.handOver(f)
		}
	}()
	for {
		s.flockMu.Lock()
		if !lead && !f.led && !f.answered {
			lead, f.led = true, true
			poll.Reset(max(time.Until(f.pollAt), 0))
		} else if !lead && f.changed == nil {
			f.changed = make(chan struct{})
		}
		answered, c, changed := f.answered, f.c, f.changed
		s.flockMu.Unlock()
		if answered {
			return s.grantFor(c, storeKey, key, owner, true)
		}
		var fired, confirmed <-chan struct{}
		var pollC <-chan time.Time
		if lead {
			changed, pollC = nil, poll.C
			if f.w != nil {
				fired, confirmed = f.sig.fired, f.w.confirmed()
			}
			if confirmed == f.polledOn {
				confirmed = nil
			}
		}
		select {
		case <-changed:
		case <-fired:
			if c, ok := s.claimFromMessage(f.sig.payload, f.c.owner); ok {
				s.settle(f, c, nil, owner)
				continue
			}
			f.sig, f.pollAt = f.w.signal(), time.Time{}
			poll.Reset(0) // not this attempt's outcome: ask Redis
		case <-confirmed:
			f.polledOn, f.pollAt = confirmed, time.Time{}
			poll.Reset(0)
		case <-pollC:
			c, err := s.claimOnce(ctx, storeKey, fp, owner, true)
			if s.onWaitPoll != nil {
				s.onWaitPoll()
			}
			if s.settle(f, c, err, owner) {
				return s.grantFor(c, storeKey, key, owner, true)
			}
			if err != nil {
				return grant{}, err
			}
			if c.kind == claimInProgress {
				poll.Reset(s.pollAfter(c.wait))
			}
		case <-deadline.C:
			s.flockMu.Lock()
			defer s.flockMu.Unlock()
			// Retry after the owner's lease at the latest.
			return grant{outcome: OutcomeInProgress}, newTimeout(key, f.c.wait)
		case <-ctx.Done():
			return grant{}, ctx.Err()
		}
	}
}

// pollAfter is when a waiter polls next, given the owner's lease left.
func (s *Service) pollAfter(leaseLeft time.Duration) time.Duration {
	return max(min(s.cfg.PollInterval, leaseLeft), time.Millisecond)
}

func (s *Service) grantFor(c claim, storeKey, key, owner string, waited bool) (grant, error) {
	switch c.kind {
	case claimNew:
		return grant{outcome: OutcomeNew, lease: s.newLease(storeKey, owner, c.token)}, nil
	case claimTakeover:
		return grant{outcome: OutcomeTakeover, lease: s.newLease(storeKey, owner, c.token)}, nil
	case claimCompleted:
		if waited {
			return grant{outcome: OutcomeWaitedReplay, resp: c.resp}, nil
		}
		return grant{outcome: OutcomeReplay, resp: c.resp}, nil
	case claimFailed:
		return grant{outcome: OutcomePreviousFailed}, &IdempotencyFailedError{Key: key, RetryAfter: c.wait, BaseError: redisfx.BaseError{Code: CodePreviousFailed,
			Message: "the previous request with this idempotency key failed; use a new key, or retry after the failure record expires"}}
	case claimNotReplayable:
		return grant{outcome: OutcomeNotReplayable}, &IdempotencyNotReplayableError{Key: key, RetryAfter: c.wait, BaseError: redisfx.BaseError{Code: CodeResponseNotStored,
			Message: "the request with this idempotency key completed, but its response could not be recorded for replay; use a new key"}}
	case claimMismatch:
		return grant{outcome: OutcomeMismatch}, &IdempotencyFingerprintMismatchError{Key: key, BaseError: redisfx.BaseError{Code: CodeKeyReused,
			Message: "this idempotency key was already used with a different request; send the same request again or use a new key"}}
	}
	return grant{}, newStoreError(fmt.Errorf("unexpected claim reply %q", c.kind))
}

// claimFromMessage reads a completion message (idemscript.Complete); ok is
// false for one that is not holder's outcome.
func (s *Service) claimFromMessage(payload, holder string) (c claim, ok bool) {
	if len(payload) < 2 || payload[1] != 'o' || holder == "" {
		return claim{}, false
	}
	n, rest, found := strings.Cut(payload[2:], ":")
	size, convErr := strconv.Atoi(n)
	if !found || convErr != nil || size != len(holder) || !strings.HasPrefix(rest, holder) {
		return claim{}, false
	}
	c = claim{kind: claimKind(payload[0]), resp: rest[len(holder):], wait: s.cfg.LockTimeout}
	switch c.kind {
	case claimNotReplayable:
		c.wait = max(s.cfg.DefaultTTL, 0)
	case claimCompleted, claimFailed:
	default:
		return claim{}, false
	}
	return c, true
}

// finish records the outcome of owned work, in the background if it must.
func (s *Service) finish(ctx context.Context, l *lease, state State, resp []byte) {
	ttl := s.cfg.DefaultTTL
	switch {
	case state == StateFailed:
		ttl = s.cfg.LockTimeout
	case ttl == NeverExpire:
		ttl = 0 // the script's "no expiry"
	}
	done, err := l.complete(ctx, state, resp, ttl)
	if err != nil {
		// Not store_error (this request ran). Each pending ends late or lost.
		s.obs.count(OutcomePendingCompletion)
		if s.late.start(ctx, func(ctx context.Context) { s.completeLate(ctx, l, state, resp, ttl) }) {
			s.log.Warn("idempotency: the outcome could not be recorded yet; trying again in the background while the record lives",
				zap.String("record", l.key), zap.Error(err))
			return
		}
		s.obs.count(OutcomeLostCompletion)
		s.log.Error("idempotency: the outcome could not be recorded; a retry may run the handler again after the lease expires",
			zap.String("record", l.key), zap.String("reason", "the Service closed first"), zap.Error(err))
		return
	}
	s.reportCompletion(ctx, l, done)
}

// reportCompletion logs and counts a completion refused or not published.
func (s *Service) reportCompletion(ctx context.Context, l *lease, done completion) {
	switch done {
	case completionRefused:
		s.obs.outcome(ctx, OutcomeStaleOwner)
		s.log.Warn("idempotency: the lease was taken over (or the record expired) before this outcome was recorded; it was not recorded",
			zap.String("record", l.key), zap.Int64("fencing_token", l.token))
	case completionUnpublished:
		s.obs.notificationFailure(notifyPublishFailed)
		if s.unpublishedLog.Allow() {
			s.log.Warn("idempotency: an outcome was recorded, but Redis refused to publish it to the waiting duplicates "+
				"(they poll every PollInterval instead); grant the Redis user the channels "+s.cfg.KeyPrefix+"*",
				zap.String("record", l.key))
		}
	}
}

type fenceKey struct{}

// leaseMark is what idempotent work carries in its context: inside it, a
// request or Do call for the record it holds is served by its lease.
type leaseMark struct {
	lease *lease
	outer *leaseMark // the work this work runs in, if any (A calls B, which sends A's key)
}

// newLeaseMark is the mark of l's work, started with ctx.
func newLeaseMark(ctx context.Context, l *lease) *leaseMark {
	outer, _ := ctx.Value(fenceKey{}).(*leaseMark)
	return &leaseMark{lease: l, outer: outer}
}

// holdsRecord reports whether work of this Service that ctx runs in holds record.
func (s *Service) holdsRecord(ctx context.Context, record string) bool {
	m, _ := ctx.Value(fenceKey{}).(*leaseMark)
	for ; m != nil; m = m.outer {
		if m.lease.s == s && m.lease.key == record && !m.lease.ended.Load() {
			return true
		}
	}
	return false
}

// FencingToken returns the fencing token of the idempotent work running in
// ctx, 0 outside it. It strictly increases at every new owner of a (scope,
// key), also after the record expired or was deleted: pass it to downstream
// writes so that they can refuse a stale attempt.
func FencingToken(ctx context.Context) int64 {
	if m, _ := ctx.Value(fenceKey{}).(*leaseMark); m != nil {
		return m.lease.token
	}
	return 0
}
