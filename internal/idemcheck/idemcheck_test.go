package idemcheck

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bounds = Bounds{LockTimeout: time.Second, WaitTimeout: time.Second, StoreTimeout: 100 * time.Millisecond,
	DefaultTTL: 3 * time.Second, Margin: 100 * time.Millisecond}

// at is a time t0 + ms milliseconds.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func exec(h *History, id string, req int64, scope, key string, token int64, inst, from, to int, kind string, body string) {
	h.AddExec(&Exec{ID: id, Req: req, Scope: scope, Key: key, FP: "A", Token: token, Instance: inst, Start: at(from)})
	h.EndExec(id, kind, 201, []byte(body), at(to))
}

func wantViolation(t *testing.T, h *History, substr string) {
	t.Helper()
	v := h.Check(bounds)
	for _, s := range v {
		if strings.Contains(s, substr) {
			return
		}
	}
	t.Fatalf("no violation containing %q in %q", substr, v)
}

func wantNone(t *testing.T, h *History) {
	t.Helper()
	if v := h.Check(bounds); len(v) > 0 {
		t.Fatalf("violations in a correct history: %q", v)
	}
}

func TestCheck_OverlapWithoutFault(t *testing.T) {
	h := NewHistory()
	exec(h, "e1", 1, "", "k", 1, 1, 0, 500, ExecOK, "1")
	exec(h, "e2", 2, "", "k", 2, 2, 100, 200, ExecOK, "2")
	wantViolation(t, h, "with no fault that could end its lease")
	// The same with a freeze of e1's instance: a takeover, allowed.
	h.AddFault(Fault{Kind: FaultFreeze, Instance: 1, Start: at(20), End: at(90)})
	wantNone(t, h)
}

func TestCheck_TakeoverWithoutHigherToken(t *testing.T) {
	h := NewHistory()
	exec(h, "e1", 1, "", "k", 1, 1, 0, 500, ExecOK, "1")
	exec(h, "e2", 2, "", "k", 1, 2, 100, 200, ExecOK, "2")
	h.AddFault(Fault{Kind: FaultCrash, Instance: 1, Start: at(20), End: at(30)})
	wantViolation(t, h, "not above")
	// Tokens increase across the loss of the record too.
	h.AddFault(Fault{Kind: FaultRestart, Instance: -1, Start: at(40), End: at(50)})
	wantViolation(t, h, "not above")
}

// An owner whose work starts late: e2 claimed first (token 1), the
// operator's Delete took its record before its work started, e1 claimed
// the record anew (token 2) and ran; e2's work then started. Tokens follow
// the claims, so the lower token of the later work is the promise kept.
func TestCheck_WorkStartedLateAfterItsRecordWasLost(t *testing.T) {
	history := func(bRequestAt int, fault bool) *History {
		h := NewHistory()
		exec(h, "e1", 1, "", "k", 2, 1, 100, 200, ExecOK, "1")
		exec(h, "e2", 2, "", "k", 1, 2, 300, 400, ExecOK, "2")
		h.AddRequest(&Request{ID: 1, Via: "do", Key: "k", FP: "A", Start: at(60), End: at(210), Status: 201, Body: []byte("1"), ExecID: "e1"})
		h.AddRequest(&Request{ID: 2, Via: "do", Key: "k", FP: "A", Start: at(bRequestAt), End: at(410), Status: 201, Body: []byte("2"), ExecID: "e2"})
		if fault {
			h.AddFault(Fault{Kind: FaultDelete, Instance: 1, Key: "k", Start: at(50), End: at(51)})
		}
		return h
	}
	wantNone(t, history(0, true))
	// Without a fault e2's claim could not have been lost.
	wantViolation(t, history(0, false), "not above")
	// A request sent after e1 started cannot have claimed before it.
	wantViolation(t, history(150, true), "not above")
}

func TestCheck_SecondExecutionOfCompletedRecord(t *testing.T) {
	h := NewHistory()
	exec(h, "e1", 1, "t", "k", 1, 1, 0, 100, ExecOK, "1")
	exec(h, "e2", 2, "t", "k", 2, 1, 1000, 1100, ExecOK, "2")
	wantViolation(t, h, "a second execution")
	// After DefaultTTL the record has expired: a new execution, token 1.
	h2 := NewHistory()
	exec(h2, "e1", 1, "t", "k", 1, 1, 0, 100, ExecOK, "1")
	exec(h2, "e2", 2, "t", "k", 2, 1, 3200, 3300, ExecOK, "2")
	wantNone(t, h2)
}

func TestCheck_ReplayOfAnotherTenant(t *testing.T) {
	h := NewHistory()
	exec(h, "e1", 1, "t1", "k", 1, 1, 0, 100, ExecOK, "body-1")
	h.AddRequest(&Request{ID: 1, Via: "http", Scope: "t1", Key: "k", FP: "A", Start: at(0), End: at(110),
		Status: 201, Body: []byte("body-1"), ExecID: "e1"})
	h.AddRequest(&Request{ID: 2, Via: "http", Scope: "", Key: "t1:k", FP: "A", Start: at(200), End: at(210),
		Status: 201, Body: []byte("body-1"), ExecID: "e1", Replayed: true})
	wantViolation(t, h, "ANOTHER RECORD")
}

func TestCheck_ReplayNotByteIdentical(t *testing.T) {
	h := NewHistory()
	exec(h, "e1", 1, "", "k", 1, 1, 0, 100, ExecOK, "body-1")
	h.AddRequest(&Request{ID: 2, Via: "http", Key: "k", FP: "A", Start: at(200), End: at(210),
		Status: 201, Body: []byte("body-"), ExecID: "e1", Replayed: true})
	wantViolation(t, h, "replay differs")
}

func TestCheck_Bounds(t *testing.T) {
	h := NewHistory()
	h.AddRequest(&Request{ID: 1, Via: "http", Key: "k", FP: "A", Start: at(0), End: at(1400),
		Status: 409, Code: "idempotency_request_in_progress"})
	wantViolation(t, h, "without running")
}

func TestCheck_StoreErrorWithoutFault(t *testing.T) {
	h := NewHistory()
	h.AddRequest(&Request{ID: 1, Via: "do", Key: "k", FP: "A", Start: at(0), End: at(10), Code: "idempotency_store_unavailable"})
	wantViolation(t, h, "no fault near")
	// One that took StoreTimeout: a slow Redis, as documented.
	h2 := NewHistory()
	h2.AddRequest(&Request{ID: 1, Via: "do", Key: "k", FP: "A", Start: at(0), End: at(150), Code: "idempotency_store_unavailable"})
	wantNone(t, h2)
	h.AddFault(Fault{Kind: FaultPause, Instance: -1, Start: at(0), End: at(5)})
	wantNone(t, h)
}

func TestCheck_UndocumentedAnswer(t *testing.T) {
	h := NewHistory()
	h.AddRequest(&Request{ID: 1, Via: "http", Key: "k", FP: "A", Start: at(0), End: at(10), Status: 200})
	wantViolation(t, h, "none of the documented")
}

func TestCheck_InProgressWithoutHolder(t *testing.T) {
	h := NewHistory()
	exec(h, "e1", 1, "", "k", 1, 1, 0, 100, ExecGoexit, "")
	h.AddRequest(&Request{ID: 2, Via: "http", Key: "k", FP: "A", Start: at(2000), End: at(3000),
		Status: 409, Code: "idempotency_request_in_progress"})
	wantViolation(t, h, "a lease that outlived its handler")
	h.AddRequest(&Request{ID: 3, Via: "http", Key: "k", FP: "A", Start: at(1500), End: at(1600), Cancelled: true})
	wantNone(t, h)
}

func TestCheck_FastStoreErrorAfterASlowOne_BreakerOpen(t *testing.T) {
	h := NewHistory()
	h.AddRequest(&Request{ID: 1, Via: "do", Instance: 1, Key: "k", FP: "A", Start: at(0), End: at(150), Code: "idempotency_store_unavailable"})
	h.AddRequest(&Request{ID: 2, Via: "do", Instance: 1, Key: "k", FP: "A", Start: at(200), End: at(201), Code: "idempotency_store_unavailable"})
	b := bounds
	if v := h.Check(b); len(v) != 1 {
		t.Fatalf("without a breaker: %q, want the fast error reported", v)
	}
	b.Breaker = time.Second
	if v := h.Check(b); len(v) != 0 {
		t.Fatalf("with a breaker: %q", v)
	}
	h.AddRequest(&Request{ID: 3, Via: "do", Instance: 1, Key: "k", FP: "A", Start: at(1500), End: at(1501), Code: "idempotency_store_unavailable"})
	if v := h.Check(b); len(v) != 1 {
		t.Fatalf("breaker open too long: %q, want it reported", v)
	}
}

// A stall long enough to let a living owner's lease lapse excuses a second
// execution (the documented limit: LockTimeout must exceed the longest
// stall); a short one does not, and ExcusedByStalls names what a stall
// excused.
// A stall within a request extends its bound by the stall's length, and
// no more: the bound of 1.3s here (WaitTimeout + 2×StoreTimeout + margin)
// is missed by 100ms; stalls of 50ms and 30ms (the part inside the request)
// do not cover it, 100ms more do.
func TestCheck_StallExtendsBoundsByItsLength(t *testing.T) {
	h := NewHistory()
	h.AddRequest(&Request{ID: 1, Via: "http", Key: "k", FP: "A", Start: at(0), End: at(1400),
		Status: 409, Code: "idempotency_request_in_progress"})
	h.AddFault(Fault{Kind: FaultStall, Instance: -1, Start: at(500), End: at(550)})
	wantViolation(t, h, "without running")
	h.AddFault(Fault{Kind: FaultStall, Instance: -1, Start: at(1370), End: at(1600)}) // 30ms of it inside
	wantViolation(t, h, "without running")
	h.AddFault(Fault{Kind: FaultStall, Instance: -1, Start: at(700), End: at(800)})
	for _, v := range h.Check(bounds) {
		if strings.Contains(v, "without running") {
			t.Fatalf("a bound covered by stalls reported: %s", v)
		}
	}
	if excused := h.ExcusedByStalls(bounds); len(excused) != 1 || !strings.Contains(excused[0], "without running") {
		t.Fatalf("excused %q, want the bound", excused)
	}
}

func TestCheck_StallExcusesOnlyWhenLongEnough(t *testing.T) {
	h := NewHistory()
	exec(h, "e1", 1, "", "k", 1, 1, 0, 900, ExecOK, "1")
	exec(h, "e2", 2, "", "k", 2, 2, 960, 1000, ExecError, "2")
	h.AddFault(Fault{Kind: FaultStall, Instance: -1, Start: at(100), End: at(250)}) // 150ms < LockTimeout/3
	wantViolation(t, h, "a second execution")
	if got := h.ExcusedByStalls(bounds); len(got) != 0 {
		t.Fatalf("a short stall excused %q", got)
	}
	h.AddFault(Fault{Kind: FaultStall, Instance: -1, Start: at(300), End: at(800)}) // 500ms >= LockTimeout/3
	wantNone(t, h)
	excused := h.ExcusedByStalls(bounds)
	if len(excused) != 1 || !strings.Contains(excused[0], "a second execution") {
		t.Fatalf("excused: %q, want the second execution", excused)
	}
	if got := h.LongestStall(); got != 500*time.Millisecond {
		t.Fatalf("longest stall %v, want 500ms", got)
	}
}

// Explain gives the timeline of a violating record: its executions, its
// requests and the faults around them, in order of time.
func TestExplain_TimelineOfTheViolatingRecord(t *testing.T) {
	h := NewHistory()
	exec(h, "e1", 1, "t1", "k", 1, 1, 0, 100, ExecOK, "1")
	exec(h, "e2", 2, "t1", "k", 2, 2, 1000, 1100, ExecOK, "2")
	exec(h, "e3", 3, "t2", "other", 3, 1, 0, 100, ExecOK, "3")
	h.AddRequest(&Request{ID: 2, Via: "http", Instance: 2, Scope: "t1", Key: "k", FP: "A", Start: at(990), End: at(1110), Status: 201, ExecID: "e2"})
	h.AddFault(Fault{Kind: FaultPubSubKill, Instance: -1, Start: at(500), End: at(510)})
	h.AddFault(Fault{Kind: FaultDelete, Instance: -1, Scope: "t9", Key: "x", Start: at(600), End: at(610)})
	got := h.Explain(h.Check(bounds), 3)
	for _, want := range []string{`timeline of record "t1"/"k"`, "exec e1 req 1 instance 1", "exec e2 req 2 instance 2",
		"request 2 http instance 2 fp A", "own e2", "fault pubsub_kill", `fault delete of "t9"/"x"`} {
		if !strings.Contains(got, want) {
			t.Errorf("timeline lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "e3") {
		t.Errorf("timeline shows another record's execution:\n%s", got)
	}
	if i, j := strings.Index(got, "exec e1"), strings.Index(got, "fault pubsub_kill"); i > j {
		t.Errorf("timeline out of order:\n%s", got)
	}
}
