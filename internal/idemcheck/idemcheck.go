// Package idemcheck is the model and history checker of the idempotency
// checker (idempotencyfx's TestIdempotencyChecker): the driver records what
// every request, every handler execution and every injected fault did, with
// wall-clock intervals, and Check compares that history with the promise of
// docs/idempotency.md.
//
// It is a seeded history checker of our own rather than a linearizability
// checker such as Porcupine: the promise is not a register's. Its parts are
// "at most one execution per record generation", "a response is one's own,
// a byte-identical replay of the same fingerprint's outcome, or a documented
// error", time bounds and expiries, and under faults some of them are
// deliberately relaxed (a restart loses records). Those rules are plain
// interval arithmetic over the history, stated in Check.
//
// The package does not import idempotencyfx, so that a test inside it can
// import this one.
package idemcheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Execution kinds: what a handler (or a Do function) did.
const (
	ExecOK     = "ok"     // answered below 400 (or Do returned a result)
	Exec4xx    = "4xx"    // answered 4xx: a completed outcome, replayed
	Exec5xx    = "5xx"    // answered 5xx: a failed outcome
	ExecError  = "error"  // returned an error
	ExecPanic  = "panic"  // panicked
	ExecGoexit = "goexit" // left through runtime.Goexit
	ExecCrash  = "crash"  // its app instance crashed while it ran
)

// Fault kinds.
const (
	FaultCrash        = "crash"         // an app instance's Redis client closed mid-handler, instance replaced
	FaultPubSubKill   = "pubsub_kill"   // CLIENT KILL TYPE pubsub
	FaultFreeze       = "freeze"        // every connection of one instance frozen (faultproxy)
	FaultFreezePubSub = "freeze_pubsub" // the subscription connection of one instance frozen
	FaultPause        = "pause"         // CLIENT PAUSE ALL
	FaultScriptFlush  = "script_flush"  // SCRIPT FLUSH
	FaultRestart      = "restart"       // redis-server killed and restarted empty
	FaultEviction     = "eviction"      // a small maxmemory with allkeys-random, filler written
	FaultDelete       = "delete"        // the operator's Service.Delete of one record
	// FaultKill is a crash that lets completions through first: the
	// instance's Service stops at once (its outbox relay with it), its
	// handlers run on and record their outcomes for a moment, then its
	// client closes as in FaultCrash. The rules read it as a crash.
	FaultKill = "kill"
	// FaultStall is not injected: the checker's process or Redis did not
	// answer a probe (WatchStalls) for a while, as on a loaded machine
	// (the race detector, other test packages). A stall of a third of the
	// lease can let a living owner's lease lapse, which the documentation
	// states (LockTimeout must exceed the longest stall).
	FaultStall = "stall"
)

// FaultKinds lists every fault kind, for reports.
var FaultKinds = []string{FaultCrash, FaultKill, FaultPubSubKill, FaultFreeze, FaultFreezePubSub, FaultPause,
	FaultScriptFlush, FaultRestart, FaultEviction, FaultDelete, FaultStall}

// Bounds are the configuration the checked services run with, and the
// margin a request may exceed its documented bound by.
type Bounds struct {
	LockTimeout  time.Duration
	WaitTimeout  time.Duration
	StoreTimeout time.Duration
	DefaultTTL   time.Duration
	// Breaker is how long after a store error that ran out of
	// StoreTimeout an instance whose client has a circuit breaker may
	// answer store errors at once (the breaker open until a probe reaches
	// Redis); 0 for clients without one.
	Breaker time.Duration
	// Margin is added to every time bound: scheduling on a loaded machine
	// under -race.
	Margin time.Duration
	// Withdraw, when set, is how long a claim whose reply was lost (a
	// store_unavailable answer) may keep its record in progress once
	// Redis answers again: the claim is withdrawn then. 0: for a lease, as
	// before. With it, a pause or stall of Redis excuses an in_progress
	// answer only within Withdraw of it (a pause only of the record's
	// shard), and a crash only where it stopped a withdrawal (a crash
	// within Withdraw after a store error of its instance).
	Withdraw time.Duration
	// Failover: a restart is a master's replica taking over, which loses
	// the writes it had not received and keeps the others (an outbox
	// delivery marker may be lost while the record still holds the events).
	Failover bool
}

// Exec is one run of a handler or of a Do function.
type Exec struct {
	ID       string
	Req      int64 // the request that ran it
	Scope    string
	Key      string
	FP       string
	Token    int64 // its fencing token
	Instance int
	Start    time.Time
	End      time.Time
	Kind     string
	Status   int    // for HTTP outcomes
	Body     []byte // what it answered (or Do returned)
	// Record is its record's Redis key, which its events' ids name.
	Record string
	// Events are the streams of the events it declared, in order (the
	// outbox: see CheckEffects); none where the checker runs without.
	Events []string
}

// Request is one request (HTTP or Do) and what its client saw.
type Request struct {
	ID       int64
	Via      string // "http" or "do"
	Instance int
	Scope    string
	Key      string
	FP       string
	Shard    string // the Cluster shard of its record ("" outside Cluster mode)
	Start    time.Time
	End      time.Time

	Cancelled bool // the client went away (its context was cancelled)
	Crashed   bool // its instance crashed while it ran: the client saw nothing
	NoAnswer  bool // a panic or Goexit went through: no response

	Status   int
	Body     []byte
	Replayed bool   // Idempotent-Replayed: true, or Do's replayed result
	ExecID   string // the execution whose body it carries (X-Exec header or Do result), if any
	Code     string // the problem code of an error response, or of Do's error
	Err      string // Do's error text
}

// Fault is one injected fault. Instance is -1 for a fault of the server.
type Fault struct {
	Kind     string
	Instance int
	Scope    string // FaultDelete
	Key      string // FaultDelete
	Shard    string // the Cluster shard a pause hit ("" for every record)
	Start    time.Time
	End      time.Time
}

// History is what the driver recorded. Its methods are safe for concurrent
// use.
type History struct {
	mu     sync.Mutex
	execs  map[string]*Exec
	order  []*Exec
	reqs   []*Request
	faults []Fault
	notes  []string // violations found while running (expiry scans)

	deliveries []Delivery      // stream entries read, in each stream's order
	recorded   map[string]bool // executions seen recorded in their record
}

// NewHistory returns an empty history.
func NewHistory() *History { return &History{execs: map[string]*Exec{}, recorded: map[string]bool{}} }

// AddExec records the start of an execution; the driver fills in the rest
// with EndExec.
func (h *History) AddExec(e *Exec) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.execs[e.ID] = e
	h.order = append(h.order, e)
}

// EndExec records how an execution ended.
func (h *History) EndExec(id, kind string, status int, body []byte, end time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.execs[id]
	switch {
	case e == nil:
	case e.Kind == ExecCrash && e.Body == nil:
		// Its instance crashed as it finished: what it answered may have
		// been recorded before the crash closed its client.
		e.Status, e.Body = status, body
	case e.End.IsZero():
		e.Kind, e.Status, e.Body, e.End = kind, status, body, end
	}
}

// CrashExec marks a running execution as crashed at t (its instance died).
func (h *History) CrashExec(id string, t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.execs[id]; e != nil && e.End.IsZero() {
		e.Kind, e.End = ExecCrash, t
	}
}

// AddRequest records a finished request.
func (h *History) AddRequest(r *Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs = append(h.reqs, r)
}

// AddFault records a fault.
func (h *History) AddFault(f Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, f)
}

// Violation records a violation found while running.
func (h *History) Violation(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notes = append(h.notes, fmt.Sprintf(format, args...))
}

// Stats are the figures of a run.
type Stats struct {
	Requests   int
	Executions int
	Replays    int
	Faults     map[string]int
	Outcomes   map[string]int // of executions, by kind
	Answers    map[string]int // of requests: "own", "replay", or the error code
}

// Stats counts the history.
func (h *History) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Stats{Requests: len(h.reqs), Executions: len(h.order), Faults: map[string]int{},
		Outcomes: map[string]int{}, Answers: map[string]int{}}
	for _, f := range h.faults {
		s.Faults[f.Kind]++
	}
	for _, e := range h.order {
		s.Outcomes[e.Kind]++
	}
	for _, r := range h.reqs {
		switch {
		case r.Crashed:
			s.Answers["crashed"]++
		case r.Cancelled:
			s.Answers["cancelled"]++
		case r.Replayed:
			s.Replays++
			s.Answers["replay"]++
		case r.ExecID != "" || r.NoAnswer:
			s.Answers["own"]++
		default:
			s.Answers[r.Code]++
		}
	}
	return s
}

// String is the figures on one line.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests, %d executions, %d replays; faults:", s.Requests, s.Executions, s.Replays)
	for _, k := range FaultKinds {
		fmt.Fprintf(&b, " %s=%d", k, s.Faults[k])
	}
	b.WriteString("; executions:")
	for _, k := range sortedKeys(s.Outcomes) {
		fmt.Fprintf(&b, " %s=%d", k, s.Outcomes[k])
	}
	b.WriteString("; answers:")
	for _, k := range sortedKeys(s.Answers) {
		fmt.Fprintf(&b, " %s=%d", k, s.Answers[k])
	}
	return b.String()
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// failed reports an execution whose outcome is recorded as failed.
func failed(kind string) bool {
	return kind == Exec5xx || kind == ExecError || kind == ExecPanic || kind == ExecGoexit
}

// Documented error codes and their HTTP statuses.
var documented = map[string]int{
	"idempotency_key_reused":              422,
	"idempotency_request_in_progress":     409,
	"idempotency_previous_failed":         409,
	"idempotency_response_not_replayable": 409,
	"idempotency_store_unavailable":       500,
}

// Check compares the history with the model and returns the violations.
//
// The rules, per record (scope, key), with executions ordered by start:
//
//  1. Overlap: an execution B that starts while an earlier A still runs
//     needs a fault that could have stopped A's lease renewals (a pause, a
//     restart, an eviction, a freeze or crash of A's instance, the
//     operator's Delete of the record, a stall of the process or of Redis
//     of at least a third of LockTimeout) between A's start and B's start;
//     and B's fencing token is higher than A's.
//  2. Re-execution: a B after A ended needs A's record to have expired (B
//     starts LockTimeout after a failed A ended, DefaultTTL after a
//     completed one), A to have crashed, or a fault as in 1 (which may have
//     lost A's outcome).
//  3. Tokens: B's token is above A's for every two consecutive executions,
//     also after the record expired, was deleted or was lost (tokens are
//     Redis TIME in microseconds, or the previous one + 1).
//  4. Answers: a request carries its own execution's response; or a replay
//     byte-identical (status and body) to a completed (below 500) execution
//     of the same scope, key and fingerprint; or a documented error with
//     its documented status (store_unavailable only around a fault, after
//     a call may have run out of StoreTimeout (a slow Redis), or within
//     Bounds.Breaker after such a slow error of the same instance (its
//     circuit breaker open),
//     key_reused only if the key was sent with another fingerprint,
//     previous_failed only if an execution of the record failed).
//     An in_progress answer needs a lease holder: an execution of the
//     record running within a lease of the request, a request that may
//     have left a claim (its client went away, a store error), or a fault.
//     With Bounds.Withdraw, a store error's claim and a pause or stall of
//     Redis excuse it only within Withdraw: the claim is withdrawn once
//     Redis answers again.
//  5. Bounds: a request ends within WaitTimeout + 2×StoreTimeout before its
//     execution (or its answer), and within 3×StoreTimeout after its
//     execution, plus Margin.
//
// Rules 1 to 3 follow the order of the claims, which the history does not
// see: it orders by the start of the work. Where B's lower token says that
// B claimed first and a fault could have ended that claim before A's, the
// pair is judged in that order (see claimedBefore).
func (h *History) Check(b Bounds) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.notes)
	perRecord := map[[2]string][]*Exec{}
	for _, e := range h.order {
		if e.End.IsZero() {
			out = append(out, fmt.Sprintf("execution %s (scope %q key %q) never ended", e.ID, e.Scope, e.Key))
			continue
		}
		k := [2]string{e.Scope, e.Key}
		perRecord[k] = append(perRecord[k], e)
	}
	out = append(out, h.checkExecutions(perRecord, b)...)
	idx := index{byReq: map[int64]*Exec{}, fps: map[[2]string]map[string]time.Time{}, failedAt: map[[2]string]time.Time{},
		execs: perRecord, abnormal: map[[2]string][]time.Time{}, lost: map[[2]string][]*Request{}}
	for _, e := range h.order {
		idx.byReq[e.Req] = e
		k := [2]string{e.Scope, e.Key}
		if failed(e.Kind) && (idx.failedAt[k].IsZero() || e.Start.Before(idx.failedAt[k])) {
			idx.failedAt[k] = e.Start
		}
	}
	idx.slowErrors = map[int][]time.Time{}
	for _, r := range h.reqs {
		if r.Code == "idempotency_store_unavailable" && r.End.Sub(r.Start) >= b.StoreTimeout {
			idx.slowErrors[r.Instance] = append(idx.slowErrors[r.Instance], r.End)
		}
	}
	for _, r := range h.reqs {
		k := [2]string{r.Scope, r.Key}
		if idx.fps[k] == nil {
			idx.fps[k] = map[string]time.Time{}
		}
		if t, ok := idx.fps[k][r.FP]; !ok || r.Start.Before(t) {
			idx.fps[k][r.FP] = r.Start
		}
		switch {
		case r.Code == "idempotency_store_unavailable" && b.Withdraw > 0 && !r.Cancelled && !r.Crashed:
			idx.lost[k] = append(idx.lost[k], r)
		case r.Cancelled || r.Crashed || r.Code == "idempotency_store_unavailable" || strings.HasPrefix(r.Code, "error"):
			idx.abnormal[k] = append(idx.abnormal[k], r.End) // may have left a claim behind
		}
	}
	for _, r := range h.reqs {
		out = append(out, h.checkAnswer(r, b, idx)...)
	}
	return out
}

// checkExecutions applies rules 1 to 3 to the executions of each record.
func (h *History) checkExecutions(perRecord map[[2]string][]*Exec, b Bounds) []string {
	reqStart := make(map[int64]time.Time, len(h.reqs))
	for _, r := range h.reqs {
		reqStart[r.ID] = r.Start
	}
	var out []string
	for k, execs := range perRecord {
		slices.SortFunc(execs, func(x, y *Exec) int { return x.Start.Compare(y.Start) })
		for j := 1; j < len(execs); j++ {
			bx := execs[j]
			for i := 0; i < j; i++ {
				a := execs[i]
				if h.claimedBefore(bx, a, reqStart, b) {
					continue
				}
				if bx.Start.Before(a.End) { // overlap
					if !h.disturbed(a, bx.Start, b) {
						out = append(out, fmt.Sprintf("record %q/%q: execution %s (token %d, instance %d, %s) started at %s while %s (token %d, instance %d) ran [%s, %s], with no fault that could end its lease",
							k[0], k[1], bx.ID, bx.Token, bx.Instance, bx.Kind, ts(bx.Start), a.ID, a.Token, a.Instance, ts(a.Start), ts(a.End)))
					} else if bx.Token <= a.Token {
						out = append(out, fmt.Sprintf("record %q/%q: execution %s took over from %s with token %d, not above %d",
							k[0], k[1], bx.ID, a.ID, bx.Token, a.Token))
					}
				}
			}
			a := execs[j-1]
			if !bx.Start.Before(a.End) && !h.claimedBefore(bx, a, reqStart, b) {
				expired := failed(a.Kind) && !bx.Start.Before(a.End.Add(b.LockTimeout)) ||
					(a.Kind == ExecOK || a.Kind == Exec4xx) && !bx.Start.Before(a.End.Add(b.DefaultTTL))
				if !expired && a.Kind != ExecCrash && !h.disturbed(a, bx.Start, b) {
					out = append(out, fmt.Sprintf("record %q/%q: execution %s (%s, fp %s) ran at %s after %s (%s, fp %s) ended at %s: a second execution with no failure expired, crash or fault",
						k[0], k[1], bx.ID, bx.Kind, bx.FP, ts(bx.Start), a.ID, a.Kind, a.FP, ts(a.End)))
				}
				if bx.Token <= a.Token {
					out = append(out, fmt.Sprintf("record %q/%q: execution %s has token %d, not above %d of the earlier %s",
						k[0], k[1], bx.ID, bx.Token, a.Token, a.ID))
				}
			}
		}
	}
	return out
}

// claimedBefore reports whether x, whose work started after y's, may
// nevertheless have claimed the record first, with the lower token, and
// lost it before y claimed it. Tokens follow the order of the claims, not
// of the work: an owner's work starts a moment after its claim answered (a
// scheduling delay under -race on a loaded machine), and if its record is
// lost in that moment (the operator's Delete, an eviction, a restart) or
// its lease lapses (a stall), the next owner's work can start first. That
// order is possible when x's request began before y's work did and a
// fault that could end x's claim lies between; the pair then obeys rules 1
// to 3 in that order, x's token below y's.
func (h *History) claimedBefore(x, y *Exec, reqStart map[int64]time.Time, b Bounds) bool {
	from, ok := reqStart[x.Req]
	if !ok || !from.Before(y.Start) || x.Token >= y.Token {
		return false
	}
	return h.disturbed(&Exec{Scope: x.Scope, Key: x.Key, Instance: x.Instance, Start: from}, y.Start, b)
}

// index is what checkAnswer looks up.
type index struct {
	byReq    map[int64]*Exec
	fps      map[[2]string]map[string]time.Time // first request of each fingerprint of a record
	failedAt map[[2]string]time.Time            // first failed execution of a record
	execs    map[[2]string][]*Exec              // of a record
	abnormal map[[2]string][]time.Time          // ends of requests of a record that may have left a claim
	lost     map[[2]string][]*Request           // its store_unavailable answers (their claims are withdrawn)
	// slowErrors are the ends of store errors that ran out of
	// StoreTimeout, per instance.
	slowErrors map[int][]time.Time
}

// breakerOpen reports whether r's instance may have had its circuit breaker
// open: a store error of the instance that ran out of StoreTimeout ended
// at most b.Breaker before r began.
func (idx index) breakerOpen(r *Request, b Bounds) bool {
	if b.Breaker == 0 {
		return false
	}
	for _, t := range idx.slowErrors[r.Instance] {
		if !t.After(r.End) && !t.Add(b.Breaker).Before(r.Start) {
			return true
		}
	}
	return false
}

// holder reports whether someone may have held the lease of r's record
// while r asked: an execution running then (or ended less than LockTimeout
// before, its lease not yet lapsed), a request that may have left a claim
// behind (a client gone, a store error: its lease lapses LockTimeout after
// it), or a fault.
func (h *History) holder(r *Request, b Bounds, idx index) bool {
	const slack = 200 * time.Millisecond
	k := [2]string{r.Scope, r.Key}
	for _, e := range idx.execs[k] {
		if !e.Start.After(r.End.Add(b.Margin)) && !e.End.Add(b.LockTimeout+slack).Before(r.Start) {
			return true
		}
	}
	for _, t := range idx.abnormal[k] {
		if !t.After(r.End) && !t.Add(b.LockTimeout+slack).Before(r.Start) {
			return true
		}
	}
	for _, l := range idx.lost[k] {
		hold := b.Withdraw
		if h.crashedWithin(l.Instance, l.End, l.End.Add(b.Withdraw)) {
			hold = b.LockTimeout + slack // its withdrawal may have been stopped
		}
		if !l.End.After(r.End) && !l.End.Add(hold).Before(r.Start) {
			return true
		}
	}
	from := r.Start.Add(-2 * b.LockTimeout)
	for _, f := range h.faults {
		if f.End.Before(from) || f.Start.After(r.End) {
			continue
		}
		brief := b.Withdraw > 0 && f.End.Add(b.Withdraw).Before(r.Start) // Redis answered long enough ago
		switch f.Kind {
		case FaultRestart, FaultEviction, FaultFreeze:
			return true
		case FaultCrash, FaultKill:
			if b.Withdraw == 0 {
				return true
			}
		case FaultPause:
			if !brief && (f.Shard == "" || r.Shard == "" || f.Shard == r.Shard) {
				return true
			}
		case FaultStall:
			if f.End.Sub(f.Start) >= b.LockTimeout/3 && !brief {
				return true
			}
		}
	}
	return false
}

// crashedWithin reports a crash of instance inst in [from, to].
func (h *History) crashedWithin(inst int, from, to time.Time) bool {
	for _, f := range h.faults {
		if (f.Kind == FaultCrash || f.Kind == FaultKill) && f.Instance == inst && !f.Start.Before(from) && !f.Start.After(to) {
			return true
		}
	}
	return false
}

func ts(t time.Time) string { return t.Format("15:04:05.000") }

// disturbed reports a fault between a's start and t that could have ended
// a's lease or lost its outcome.
func (h *History) disturbed(a *Exec, t time.Time, b Bounds) bool {
	from := a.Start.Add(-b.StoreTimeout)
	for _, f := range h.faults {
		if f.End.Before(from) || f.Start.After(t) {
			continue
		}
		switch f.Kind {
		case FaultPause, FaultRestart, FaultEviction:
			return true
		case FaultStall:
			if f.End.Sub(f.Start) >= b.LockTimeout/3 {
				return true
			}
		case FaultFreeze, FaultCrash, FaultKill:
			if f.Instance == a.Instance {
				return true
			}
		case FaultDelete:
			if f.Scope == a.Scope && f.Key == a.Key {
				return true
			}
		}
	}
	return false
}

// faultNear reports a fault that could make a request of instance inst
// fail with a store error in [from, to].
func (h *History) faultNear(inst int, from, to time.Time, b Bounds) bool {
	from = from.Add(-b.Margin)
	to = to.Add(b.Margin)
	for _, f := range h.faults {
		if f.End.Before(from) || f.Start.After(to) {
			continue
		}
		switch f.Kind {
		case FaultPause, FaultRestart, FaultEviction:
			return true
		case FaultStall:
			if f.End.Sub(f.Start) >= b.StoreTimeout/2 {
				return true
			}
		case FaultFreeze, FaultCrash, FaultKill:
			if f.Instance == inst {
				return true
			}
		}
	}
	return false
}

// stalledWithin is how long the process or Redis stood still (stall
// faults) within [from, to]: time no bound can count against the library,
// as the machine gave it none.
func (h *History) stalledWithin(from, to time.Time) time.Duration {
	var d time.Duration
	for _, f := range h.faults {
		if f.Kind != FaultStall || !f.End.After(from) || !f.Start.Before(to) {
			continue
		}
		start, end := f.Start, f.End
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		d += end.Sub(start)
	}
	return d
}

func (h *History) checkAnswer(r *Request, b Bounds, idx index) []string {
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("request %d (%s, instance %d, scope %q key %q fp %s, [%s, %s]): ", r.ID, r.Via, r.Instance,
			r.Scope, r.Key, r.FP, ts(r.Start), ts(r.End))+fmt.Sprintf(format, args...))
	}
	own := idx.byReq[r.ID]
	// Bounds.
	if !r.Crashed {
		// Each bound is extended by the stalls within the interval it
		// measures (reported, with what they excused, by ExcusedByStalls).
		before := b.WaitTimeout + 2*b.StoreTimeout + b.Margin
		switch {
		case own != nil:
			if d := own.Start.Sub(r.Start); d > before+h.stalledWithin(r.Start, own.Start) {
				bad("its execution started %v after the request (bound %v)", d, before)
			}
			after := 3*b.StoreTimeout + b.Margin
			if d := r.End.Sub(own.End); d > after+h.stalledWithin(own.End, r.End) {
				bad("answered %v after its execution ended (bound %v)", d, after)
			}
		default:
			if d := r.End.Sub(r.Start); d > before+h.stalledWithin(r.Start, r.End) {
				bad("took %v without running (bound WaitTimeout + 2×StoreTimeout + margin = %v)", d, before)
			}
		}
	}
	if r.Crashed || r.Cancelled {
		return out
	}
	if r.NoAnswer {
		if own == nil || (own.Kind != ExecPanic && own.Kind != ExecGoexit) {
			bad("no answer without a panic or Goexit of its own execution")
		}
		return out
	}
	if r.ExecID != "" {
		e := h.execs[r.ExecID]
		switch {
		case e == nil:
			bad("carries execution %s, which never ran", r.ExecID)
		case e.Scope != r.Scope || e.Key != r.Key:
			bad("carries the response of execution %s of ANOTHER RECORD (scope %q key %q)", e.ID, e.Scope, e.Key)
		case e.FP != r.FP:
			bad("carries the response of execution %s of another fingerprint %s", e.ID, e.FP)
		case r.Replayed && e.Kind != ExecOK && e.Kind != Exec4xx && e.Kind != ExecCrash:
			bad("replays execution %s, whose outcome (%s) is not a completed one", e.ID, e.Kind)
		case r.Replayed && (e.Status != r.Status || !bytes.Equal(e.Body, r.Body)):
			bad("replay differs from execution %s: status %d body %q, recorded %d %q", e.ID, r.Status, r.Body, e.Status, e.Body)
		case !r.Replayed && e.Req != r.ID:
			bad("carries execution %s of request %d without being a replay", e.ID, e.Req)
		case !r.Replayed && (e.Status != r.Status || !bytes.Equal(e.Body, r.Body)):
			bad("its own answer differs from what its execution wrote: %d %q, wrote %d %q", r.Status, r.Body, e.Status, e.Body)
		}
		return out
	}
	if own != nil && own.Kind == ExecError && r.Code == "internal_error" {
		return out // the handler's error through the error filter
	}
	if own != nil && own.Kind == ExecPanic && r.Code == "internal_error" {
		return out // a panic through the recovery middleware
	}
	want, ok := documented[r.Code]
	switch {
	case !ok:
		bad("answer %d %q (code %q, error %q) is none of the documented ones", r.Status, r.Body, r.Code, r.Err)
	case r.Via == "http" && r.Status != want:
		bad("code %s with status %d, documented %d", r.Code, r.Status, want)
	case r.Code == "idempotency_store_unavailable" && r.End.Sub(r.Start) < b.StoreTimeout &&
		!h.faultNear(r.Instance, r.Start, r.End, b) && !idx.breakerOpen(r, b):
		bad("store_unavailable within %v, before any call could run out of StoreTimeout, with no fault near and no slow store error of its instance within %v before it (a circuit breaker open too long?) (%s)",
			r.End.Sub(r.Start), b.Breaker, r.Err)
	case r.Code == "idempotency_key_reused" && !idx.otherFingerprint(r):
		bad("key_reused, but the key was never sent with another fingerprint")
	case r.Code == "idempotency_previous_failed" && !idx.someFailed(r):
		bad("previous_failed, but no execution of the record failed")
	case r.Code == "idempotency_request_in_progress" && !h.holder(r, b, idx):
		bad("in_progress, but no execution ran, no claim was left and no fault hit within a lease of it (a lease that outlived its handler)")
	}
	return out
}

func (idx index) otherFingerprint(r *Request) bool {
	for fp, t := range idx.fps[[2]string{r.Scope, r.Key}] {
		if fp != r.FP && t.Before(r.End) {
			return true
		}
	}
	return false
}

func (idx index) someFailed(r *Request) bool {
	t := idx.failedAt[[2]string{r.Scope, r.Key}]
	return !t.IsZero() && t.Before(r.End)
}

// CheckExpiries scans the keys under prefix and reports every one without
// an expiry (PTTL -1).
func CheckExpiries(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, int, error) {
	var out []string
	n := 0
	iter := rdb.Scan(ctx, 0, escapeGlob(prefix)+"*", 200).Iterator()
	for iter.Next(ctx) {
		n++
		ttl, err := rdb.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			return out, n, err
		}
		if ttl == -1 {
			typ, _ := rdb.HGet(ctx, iter.Val(), "s").Result()
			out = append(out, fmt.Sprintf("key %q (state %q) has no expiry", iter.Val(), typ))
		}
	}
	return out, n, iter.Err()
}

func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Duration is REDISFX_CHECK_DURATION, or def.
func Duration(t testing.TB, def time.Duration) time.Duration {
	v := os.Getenv("REDISFX_CHECK_DURATION")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("REDISFX_CHECK_DURATION=%q: want a positive Go duration such as 10m", v)
	}
	return d
}

// Seed is REDISFX_CHECK_SEED when set (ok true), else a fresh seed.
func Seed(t testing.TB) (seed uint64, fromEnv bool) {
	if v := os.Getenv("REDISFX_CHECK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("REDISFX_CHECK_SEED=%q: want an unsigned integer", v)
		}
		return s, true
	}
	return uint64(time.Now().UnixNano()), false
}

// Seeds is REDISFX_CHECK_SEED alone when set, else the kept seeds (earlier
// failures, kept as regression runs) and a fresh one. Every randomized
// checker of the repository runs its seeds from here.
func Seeds(t testing.TB, kept []uint64) []uint64 {
	seed, fromEnv := Seed(t)
	if fromEnv {
		return []uint64{seed}
	}
	return append(slices.Clone(kept), seed)
}

// violationKinds are the kinds of violation Check reports, by a phrase of
// its message.
var violationKinds = []string{"no execution declared", "does not match it", "times: ", "is never recorded",
	"two executions of one record", "were never delivered", "out of order", "come after those", "outbox",
	"ANOTHER RECORD", "another fingerprint", "not a completed one", "replay differs",
	"without being a replay", "own answer differs", "which never ran", "none of the documented", "store_unavailable",
	"key_reused", "previous_failed", "in_progress", "without running", "its execution started", "after its execution ended",
	"no fault that could end its lease", "not above", "a second execution", "still in progress",
	"no expiry", "never ended", "no answer"}

// Group sorts violations by kind, so that a report can show a few of each.
func Group(violations []string) map[string][]string {
	out := map[string][]string{}
	for _, v := range violations {
		kind := "other"
		for _, k := range violationKinds {
			if strings.Contains(v, k) {
				kind = k
				break
			}
		}
		out[kind] = append(out[kind], v)
	}
	return out
}

// Explain is the timeline of the records that the violations name (at most
// limit records): every request and execution of the record and every fault
// around them, in order of time, so that a failing seed can be understood
// without replaying it (a replay re-creates the storm, not the
// interleaving).
func (h *History) Explain(violations []string, limit int) string {
	var b strings.Builder
	seen := map[[2]string]bool{}
	for _, v := range violations {
		var scope, key string
		if _, err := fmt.Sscanf(v, "record %q/%q:", &scope, &key); err != nil {
			if _, err := fmt.Sscanf(v, "request %*d (%*s instance %*d, scope %q key %q", &scope, &key); err != nil {
				continue
			}
		}
		k := [2]string{scope, key}
		if seen[k] || len(seen) == limit {
			continue
		}
		seen[k] = true
		h.explainRecord(&b, k)
	}
	return b.String()
}

func (h *History) explainRecord(b *strings.Builder, k [2]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	var from, to time.Time
	span := func(s, e time.Time) {
		if from.IsZero() || s.Before(from) {
			from = s
		}
		if e.After(to) {
			to = e
		}
	}
	for _, e := range h.order {
		if e.Scope != k[0] || e.Key != k[1] {
			continue
		}
		span(e.Start, e.End)
		lines = append(lines, line{e.Start, fmt.Sprintf("exec %s req %d instance %d token %d fp %s: %s, ran until %s (status %d)%s",
			e.ID, e.Req, e.Instance, e.Token, e.FP, e.Kind, ts(e.End), e.Status, declared(e, h.recorded[e.ID]))})
	}
	for _, r := range h.reqs {
		if r.Scope != k[0] || r.Key != k[1] {
			continue
		}
		span(r.Start, r.End)
		answer := r.Code
		switch {
		case r.Crashed:
			answer = "crashed"
		case r.Cancelled:
			answer = "cancelled"
		case r.Replayed:
			answer = "replay of " + r.ExecID
		case r.ExecID != "":
			answer = "own " + r.ExecID
		}
		if r.Err != "" {
			answer += " (" + r.Err + ")"
		}
		lines = append(lines, line{r.Start, fmt.Sprintf("request %d %s instance %d fp %s: until %s, status %d, %s",
			r.ID, r.Via, r.Instance, r.FP, ts(r.End), r.Status, answer)})
	}
	for _, d := range h.deliveries {
		if e, _ := h.eventOf(d.Data); e != nil && e.Scope == k[0] && e.Key == k[1] {
			lines = append(lines, line{d.At, fmt.Sprintf("read event %s in %s as %s (event_id %s)", d.Data, d.Stream, d.EntryID, d.EventID)})
		}
	}
	from, to = from.Add(-2*time.Second), to.Add(time.Second)
	for _, f := range h.faults {
		if f.End.Before(from) || f.Start.After(to) {
			continue
		}
		what := f.Kind
		if f.Instance >= 0 {
			what += fmt.Sprintf(" of instance %d", f.Instance)
		}
		if f.Kind == FaultDelete {
			what += fmt.Sprintf(" of %q/%q", f.Scope, f.Key)
		}
		lines = append(lines, line{f.Start, fmt.Sprintf("fault %s, until %s", what, ts(f.End))})
	}
	slices.SortStableFunc(lines, func(x, y line) int { return x.at.Compare(y.at) })
	fmt.Fprintf(b, "timeline of record %q/%q:\n", k[0], k[1])
	for _, l := range lines {
		fmt.Fprintf(b, "  %s %s\n", ts(l.at), l.text)
	}
}

// StallProbeEvery is how often WatchStalls probes.
const StallProbeEvery = 20 * time.Millisecond

// WatchStalls records a FaultStall whenever one turn of its probe (sleep
// StallProbeEvery, then PING rdb) takes longer than threshold, until ctx
// ends: the process was not scheduled, or Redis did not answer. It runs in
// the caller's goroutine. Probes that fail at once (Redis restarting) are
// not stalls; one that blocks (a CLIENT PAUSE) is recorded beside the
// injected fault, which does no harm.
func (h *History) WatchStalls(ctx context.Context, rdb redis.UniversalClient, threshold time.Duration) {
	for ctx.Err() == nil {
		began := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-time.After(StallProbeEvery):
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = rdb.Ping(pctx).Err()
		cancel()
		if end := time.Now(); end.Sub(began) > threshold && ctx.Err() == nil {
			h.AddFault(Fault{Kind: FaultStall, Instance: -1, Start: began, End: end})
		}
	}
}

// ExcusedByStalls returns the violations that Check would report if the
// stalls were not faults: what the run excused because the process or
// Redis stalled. A report shows them, so that the stall rule never hides a
// bug unseen.
func (h *History) ExcusedByStalls(b Bounds) []string {
	h.mu.Lock()
	without := &History{execs: h.execs, order: h.order, reqs: h.reqs}
	for _, f := range h.faults {
		if f.Kind != FaultStall {
			without.faults = append(without.faults, f)
		}
	}
	h.mu.Unlock()
	with := map[string]bool{}
	for _, v := range h.Check(b) {
		with[v] = true
	}
	var out []string
	for _, v := range without.Check(b) {
		if !with[v] {
			out = append(out, v)
		}
	}
	return out
}

// LongestStall is the longest stall recorded (0 if none).
func (h *History) LongestStall() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var d time.Duration
	for _, f := range h.faults {
		if f.Kind == FaultStall {
			d = max(d, f.End.Sub(f.Start))
		}
	}
	return d
}

// RunTwice returns the keys run twice, whatever the faults: each pair of
// executions of one record where the later started while the earlier held
// it (overlapping it, or before a failed one's lease or a completed one's
// DefaultTTL ran out). A mode whose faults lose writes (a failover) judges
// each pair against its own window.
func (h *History) RunTwice(b Bounds) [][2]Exec {
	h.mu.Lock()
	defer h.mu.Unlock()
	perRecord := map[[2]string][]*Exec{}
	for _, e := range h.order {
		if !e.End.IsZero() {
			k := [2]string{e.Scope, e.Key}
			perRecord[k] = append(perRecord[k], e)
		}
	}
	var out [][2]Exec
	for _, execs := range perRecord {
		slices.SortFunc(execs, func(x, y *Exec) int { return x.Start.Compare(y.Start) })
		for j := 1; j < len(execs); j++ {
			a, bx := execs[j-1], execs[j]
			held := b.LockTimeout
			if a.Kind == ExecOK || a.Kind == Exec4xx {
				held = b.DefaultTTL
			}
			if a.Kind != ExecCrash && bx.Start.Before(a.End.Add(held)) {
				out = append(out, [2]Exec{*a, *bx})
			}
		}
	}
	return out
}

// Count is how many violations there are of each kind (as Group sorts them).
func Count(violations []string) map[string]int {
	out := map[string]int{}
	for kind, vs := range Group(violations) {
		out[kind] = len(vs)
	}
	return out
}
