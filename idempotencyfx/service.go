package idempotencyfx

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/detach"
	"github.com/redisfx/redisfx/internal/durations"
	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/internal/randid"
	"github.com/redisfx/redisfx/internal/scripts"
	"github.com/redisfx/redisfx/internal/throttle"
	"github.com/redisfx/redisfx/plugintrace"
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
	calls  *detach.Timeouts // StoreTimeout contexts of claims and completions
	notify *notifier
	late   *lateCompletions
	log    *zap.Logger
	obs    *observer
	errors *httpfx.Errors

	withdrawing    atomic.Int64   // withdrawals in flight (maxWithdrawals)
	withdrawLog    throttle.Every // the too-many-withdrawals error, at most every 10s
	failOpenLog    throttle.Every // the fail-open warning, at most every 10s
	refusedLog     throttle.Every // the fail-closed error, at most every 10s
	unpublishedLog throttle.Every // the failed-notification warning, at most every 10s

	// onWaitPoll, set only by tests before any request, is called after
	// every poll of a waiting duplicate: a test that needs the waiter
	// parked (its confirmation poll done) waits for it instead of racing it.
	onWaitPoll func()
}

// New builds a Service on a Redis client, without Fx. Options add a logger,
// tracing, metrics and the HTTP error chain.
//
// The client must honour context deadlines, so that StoreTimeout bounds every
// Redis call: a go-redis client needs ContextTimeoutEnabled (storefx.New
// sets it); New refuses one without it.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Service, error) {
	st, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if err := checkClient(rdb); err != nil {
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
		store:          store{rdb: rdb, acks: st.ReplicaAcks, ackTimeout: st.ReplicaAckTimeout},
		log:            o.log,
		late:           newLateCompletions(),
		calls:          detach.New(st.StoreTimeout),
	}
	s.obs, err = newObserver(o.registerer, o.tracer)
	if err != nil {
		return nil, err
	}
	s.notify = newNotifier(rdb, o.log, s.obs, st.StoreTimeout)
	s.errors = o.errors
	if s.errors == nil {
		s.errors = httpfx.NewErrors(o.log, httpfx.RegisteredErrorFilter{Name: "idempotency", Filter: httpfx.ErrorFilter(DefaultErrorFilter)})
	}
	return s, nil
}

// Start preloads the scripts (so the first request pays no SCRIPT LOAD),
// warns about records that never expire and about a lease too short to be
// kept under load, and checks that the Redis user may use the channels
// that wake waiting duplicates.
func (s *Service) Start(ctx context.Context) error {
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

// checkChannels publishes on a channel under KeyPrefix that no record uses
// (KeyPrefix + ":": a record's key after the prefix is never empty before a
// ':'), to find out at start whether the Redis user has channel permission.
// Redis 7 gives none by default (acl-pubsub-default resetchannels) to an
// ACL user made without "&…" or "allchannels". Without it, waiting
// duplicates are not woken by notification and fall back to polling: the
// service works, slower, so this is a warning, not a start-up failure.
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

// checkEviction warns when Redis may evict idempotency records: every record
// has a TTL, so any volatile-* or allkeys-* maxmemory policy can drop one,
// and an evicted record lets a retry (or a concurrent duplicate) run the
// handler again. It reads INFO (allowed where CONFIG is not, as on managed
// Redis); on a Cluster one node answers.
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

// Shutdown ends the Service gracefully: outcomes still being recorded in
// the background (their request's own tries failed) get until ctx is done
// to land, then the rest are given up, and the completion subscription
// stops. It returns when ctx is done at the latest: a try already sent then
// ends on its own, within StoreTimeout or when the Redis client is closed.
// In-flight requests should be drained first (httpfx stops the server
// before this runs). idempotencyfx.Module calls it on stop, with a grace of
// at most 2×StoreTimeout and half of the stop deadline.
func (s *Service) Shutdown(ctx context.Context) error {
	s.late.shutdown(ctx)
	s.notify.close()
	return nil
}

// stop is the Fx stop hook: Shutdown with a grace of at most two tries
// (2×StoreTimeout) and at most half of what is left of the stop deadline.
// Outcomes still pending at stop mean Redis is out of reach, where waiting
// longer rarely helps, and the hooks that run after this one (storefx
// closing the client, tracingfx flushing the last spans) need the rest.
func (s *Service) stop(ctx context.Context) error {
	grace := durations.Mul(s.cfg.StoreTimeout, 2)
	if deadline, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(deadline)/2)
	}
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	return s.Shutdown(ctx)
}

// Close is Shutdown without the grace: outcomes still being recorded in
// the background are given up at once (each is logged).
func (s *Service) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return s.Shutdown(ctx)
}

// Config returns the effective configuration, defaults applied.
func (s *Service) Config() Config { return s.cfg.Config }

// StoreKey returns the Redis key of an idempotency key in a scope ("" for
// none). The layout (see storeKey) is an unambiguous encoding of the pair:
// no two (scope, key) pairs share a Redis key.
func (s *Service) StoreKey(scope, key string) string {
	return storeKey(s.cfg.KeyPrefix, scope, key)
}

// newOwner is a claim's owner token: 96 random bits, so that no one who
// sees the tokens of completion messages (any client of the server can
// subscribe to them, from any database) can name the owner of a record
// still running and forge its outcome for its waiters. (An adversary
// predicted the next tokens when they were a prefix and a counter.)
func (s *Service) newOwner() string { return randid.Hex(12) }

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
	if c.kind != claimInProgress {
		return s.grantFor(c, storeKey, key, owner, false)
	}
	if !waiting {
		return grant{outcome: OutcomeInProgress}, newTimeout(key, c.wait)
	}
	return s.wait(ctx, storeKey, key, fp, owner, c)
}

func (s *Service) claimOnce(ctx context.Context, storeKey, fp, owner string, waiting bool) (claim, error) {
	if err := ctx.Err(); err != nil {
		return claim{}, err // the client has gone: claim nothing for it
	}
	// Once sent, a claim is let finish (within StoreTimeout) even if the
	// client goes away meanwhile: one cut off in flight may still land and
	// leave a record that no one owns until its lease runs out. A detached
	// context is also cheaper: it does not register with the request's,
	// and its deadline is shared with the other calls of its moment.
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

// wait waits for the in-flight request of storeKey, whose claim reply was
// running (its lease left and owner): woken by its completion message, or
// by polling, which also notices an owner whose lease ran out, and takes
// over.
//
// A message is taken only if it names the owner the latest claim reply
// showed running: the channel is shared by every database of the server
// (and by other clients that write the same key name), and the record may
// have been deleted and taken anew meanwhile; the owner token is unique to
// one attempt on this very record. Any other message (another owner's, one
// of a version without the owner) makes the waiter ask its own record.
//
// WaitTimeout bounds the wait whatever pub/sub does: the waiter never waits
// for the network to subscribe. It polls at once when its subscription is
// confirmed (a completion before that was not published to it), and every
// PollInterval (or when the lease runs out, if sooner) in any case, so a
// lost message, a refused or silent subscription only slows it down. A
// claim in flight at the deadline is let finish (it may take over the
// record, which must not be left orphaned): a wait lasts at most
// WaitTimeout plus one claim, bounded by StoreTimeout. It ends at once when
// ctx ends (the client went away).
func (s *Service) wait(ctx context.Context, storeKey, key, fp, owner string, running claim) (grant, error) {
	leaseLeft, holder := running.wait, running.owner
	began := time.Now()
	ctx, span := s.obs.startWait(ctx, s.cfg.WaitTimeout)
	deadline := time.NewTimer(s.cfg.WaitTimeout)
	defer deadline.Stop()
	w := s.notify.watch(storeKey)
	defer w.release()
	g, err := func() (grant, error) {
		poll := time.NewTimer(s.pollAfter(leaseLeft))
		defer poll.Stop()
		var polledOn <-chan struct{} // the confirmation already answered with a poll
		// The signal is kept until it fires, not taken anew on every turn:
		// a message delivered while this waiter's poll is in flight fires
		// it, and the waiter must still see it after handling the poll.
		sig := w.signal()
		for {
			confirmed := w.confirmed()
			if confirmed == polledOn {
				confirmed = nil
			}
			select {
			case <-sig.fired:
				if g, ok, err := s.grantFromMessage(sig.payload, key, holder); ok {
					return g, err
				}
				sig = w.signal()
				poll.Reset(0) // not this request's outcome: ask Redis
			case <-confirmed:
				polledOn = confirmed
				poll.Reset(0)
			case <-poll.C:
				c, err := s.claimOnce(ctx, storeKey, fp, owner, true)
				if s.onWaitPoll != nil {
					s.onWaitPoll()
				}
				if err != nil {
					return grant{}, err
				}
				if c.kind != claimInProgress {
					return s.grantFor(c, storeKey, key, owner, true)
				}
				leaseLeft, holder = c.wait, c.owner
				poll.Reset(s.pollAfter(c.wait))
			case <-deadline.C:
				// Retry after the owner's lease at the latest: by then it has
				// finished, or its key can be taken over.
				return grant{outcome: OutcomeInProgress}, newTimeout(key, leaseLeft)
			case <-ctx.Done():
				return grant{}, ctx.Err()
			}
		}
	}()
	s.obs.waited(span, time.Since(began), g.outcome, err)
	return g, err
}

// pollAfter is when a waiter polls next, given the owner's lease left.
func (s *Service) pollAfter(leaseLeft time.Duration) time.Duration {
	return min(s.cfg.PollInterval, max(leaseLeft, time.Millisecond))
}

// grantFor turns a claim reply into a grant or an error.
func (s *Service) grantFor(c claim, storeKey, key, owner string, waited bool) (grant, error) {
	switch c.kind {
	case claimNew:
		return grant{outcome: OutcomeNew, lease: s.newLease(storeKey, owner, c.token)}, nil
	case claimTakeover:
		return grant{outcome: OutcomeTakeover, lease: s.newLease(storeKey, owner, c.token)}, nil
	case claimCompleted:
		return grant{outcome: replayOutcome(waited), resp: c.resp}, nil
	case claimFailed:
		return grant{outcome: OutcomePreviousFailed}, newFailed(key, c.wait)
	case claimNotReplayable:
		return grant{outcome: OutcomeNotReplayable}, newNotReplayable(key, c.wait)
	case claimMismatch:
		return grant{outcome: OutcomeMismatch}, newMismatch(key)
	}
	return grant{}, newStoreError(fmt.Errorf("unexpected claim reply %q", c.kind))
}

// grantFromMessage reads a completion message (see idemscript.Complete):
// state byte, 'o', owner token length, ':', owner token, response. ok is
// false for a message this waiter cannot use: not well formed, of an older
// version (state, fingerprint, response: it does not say which record it
// is of), or the outcome of another owner than holder, the one this
// waiter's claim saw running (the same key in another database of the
// server, or the record deleted and taken by another request while this
// one waited); the waiter then asks its own record.
func (s *Service) grantFromMessage(payload, key, holder string) (g grant, ok bool, err error) {
	if len(payload) < 2 || payload[1] != 'o' || holder == "" {
		return grant{}, false, nil
	}
	state, rest := State(payload[:1]), payload[2:]
	n, rest, found := strings.Cut(rest, ":")
	size, convErr := strconv.Atoi(n)
	if !found || convErr != nil || size != len(holder) || !strings.HasPrefix(rest, holder) {
		return grant{}, false, nil
	}
	resp := rest[len(holder):]
	switch state {
	case StateCompleted:
		return grant{outcome: OutcomeWaitedReplay, resp: resp}, true, nil
	case StateFailed:
		return grant{outcome: OutcomePreviousFailed}, true, newFailed(key, s.cfg.LockTimeout)
	case StateNotReplayable:
		return grant{outcome: OutcomeNotReplayable}, true, newNotReplayable(key, max(s.cfg.DefaultTTL, 0))
	}
	return grant{}, false, nil
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
	switch {
	case state == StateFailed:
		ttl = s.cfg.LockTimeout
	case ttl == NeverExpire:
		ttl = 0 // the script's "no expiry"
	}
	done, err := l.complete(ctx, state, resp, ttl)
	if err != nil {
		// Not store_error: that counts requests refused (or run unprotected)
		// because Redis failed, and this one ran and is answered. Each
		// pending outcome ends as late or lost: pending = late + lost.
		s.obs.count(OutcomePendingCompletion)
		if s.late.start(func(stop context.Context) { s.completeLate(ctx, stop, l, state, resp, ttl) }) {
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

// reportCompletion logs and counts a completion that reached Redis but did
// not simply record the outcome.
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

// warnFailOpen logs that a request runs unprotected, at most every 10s.
func (s *Service) warnFailOpen(err error) {
	if !s.failOpenLog.Allow() {
		return
	}
	s.log.Warn("idempotency: store unavailable, running the handler WITHOUT idempotency protection (fail-open)", zap.Error(err))
}

type fenceKey struct{}

// leaseMark is what idempotent work carries in its context: the fencing
// token and the lease, which names the Service and the record it holds.
// Inside the work, a request (or a Do call) with the key, in the same
// scope, of the record that work holds is served by the work's lease: a
// second Idempotent() bound on the same route, with a copy or a Clone of
// the request between, or the same key sent again from the handler. Claiming
// that record again could only wait for the work it runs in. With any other
// key, or for another Service, it is a sub-request, protected in its own
// right, whatever writer or request it is served with. Once the work has
// ended (a goroutine of the handler outliving it, say) the mark serves
// nothing.
type leaseMark struct {
	token int64
	lease *lease
	outer *leaseMark // the work this work runs in, if any (A calls B, which sends A's key)
}

// newLeaseMark is the mark of l's work, started with ctx.
func newLeaseMark(ctx context.Context, l *lease) *leaseMark {
	outer, _ := ctx.Value(fenceKey{}).(*leaseMark)
	return &leaseMark{token: l.token, lease: l, outer: outer}
}

// holdsRecord reports whether ctx is idempotent work of this Service, still
// running, whose lease holds record: the same key claimed again inside it
// would wait for itself. Another Service's work never counts: with the
// same KeyPrefix on another Redis (or database) its record is another.
func (s *Service) holdsRecord(ctx context.Context, record string) bool {
	m, _ := ctx.Value(fenceKey{}).(*leaseMark)
	for ; m != nil; m = m.outer { // any work this one runs in: A's key sent from B inside A waits for A too
		if m.lease.s == s && m.lease.key == record && m.lease.working() {
			return true
		}
	}
	return false
}

// FencingToken returns the fencing token of the idempotent work running in
// ctx. It strictly increases at every new owner of a (scope, key): Redis
// TIME in microseconds at the claim, or the previous owner's token + 1 if
// that is higher (a takeover within the same microsecond, a Redis clock set
// back), so it also increases after the record expired, was deleted or was
// lost. Pass it to downstream writes so that they can refuse a stale
// attempt. It is 0 outside idempotent work.
func FencingToken(ctx context.Context) int64 {
	if m, _ := ctx.Value(fenceKey{}).(*leaseMark); m != nil {
		return m.token
	}
	return 0
}
