package idemcheck

import (
	"strings"
	"testing"
)

// withEvents is exec with events declared to streams, its record "r:<key>".
func withEvents(h *History, id string, req int64, key string, token int64, from, to int, kind string, streams ...string) *Exec {
	h.AddExec(&Exec{ID: id, Req: req, Key: key, FP: "A", Token: token, Instance: 1, Start: at(from), Record: "r:" + key, Events: streams})
	h.EndExec(id, kind, 201, []byte(id), at(to))
	return h.execs[id]
}

var entrySeq int

func deliver(h *History, e *Exec, i, ms int) {
	entrySeq++
	h.AddDelivery(Delivery{Stream: e.Events[i], EntryID: "1-" + string(rune('0'+entrySeq%10)), EventID: EventID(e, i), Data: EventData(e.ID, i), At: at(ms)})
}

func wantEffects(t *testing.T, h *History, substr string) {
	t.Helper()
	v, _ := h.CheckEffects(bounds)
	for _, s := range v {
		if substr != "" && strings.Contains(s, substr) {
			return
		}
	}
	if substr == "" && len(v) == 0 {
		return
	}
	t.Fatalf("want a violation containing %q, got %q", substr, v)
}

func TestEffects_DeliveredOnceInOrder(t *testing.T) {
	h := NewHistory()
	e := withEvents(h, "e1", 1, "k", 10, 0, 50, ExecOK, "a", "b", "a")
	deliver(h, e, 0, 60)
	deliver(h, e, 1, 60)
	deliver(h, e, 2, 61)
	wantEffects(t, h, "")
	deliver(h, e, 1, 70)
	wantEffects(t, h, "delivered 2 times")
	// An eviction between the readings may have taken the marker.
	h.AddFault(Fault{Kind: FaultEviction, Instance: -1, Start: at(65), End: at(66)})
	wantEffects(t, h, "")
}

func TestEffects_OutOfOrder(t *testing.T) {
	h := NewHistory()
	e := withEvents(h, "e1", 1, "k", 10, 0, 50, ExecOK, "a", "a")
	deliver(h, e, 1, 60)
	deliver(h, e, 0, 60)
	wantEffects(t, h, "out of order")
}

func TestEffects_FailedExecutionDelivered(t *testing.T) {
	h := NewHistory()
	e := withEvents(h, "e1", 1, "k", 10, 0, 50, Exec5xx, "a")
	deliver(h, e, 0, 60)
	wantEffects(t, h, "is never recorded")
}

func TestEffects_TwoExecutionsOfOneRecord(t *testing.T) {
	h := NewHistory()
	a := withEvents(h, "e1", 1, "k", 10, 0, 2000, ExecOK, "a") // slow: its lease was taken over
	b := withEvents(h, "e2", 2, "k", 20, 1500, 1600, ExecOK, "a")
	deliver(h, a, 0, 2010)
	deliver(h, b, 0, 1610)
	wantEffects(t, h, "two executions of one record")
	// After the first's record expired, both are recorded outcomes.
	h = NewHistory()
	a = withEvents(h, "e1", 1, "k", 10, 0, 50, ExecOK, "a")
	b = withEvents(h, "e2", 2, "k", 20, 3100, 3200, ExecOK, "a")
	deliver(h, a, 0, 60)
	deliver(h, b, 0, 3210)
	wantEffects(t, h, "")
}

func TestEffects_Lost(t *testing.T) {
	h := NewHistory()
	e := withEvents(h, "e1", 1, "k", 10, 0, 50, ExecOK, "a", "b")
	deliver(h, e, 0, 60)
	wantEffects(t, h, "were never delivered")
	// Seen recorded, none delivered: lost too, unless its record was.
	h = NewHistory()
	e = withEvents(h, "e1", 1, "k", 10, 0, 50, ExecOK, "a")
	h.Recorded(e.ID)
	wantEffects(t, h, "were never delivered")
	h.AddFault(Fault{Kind: FaultDelete, Instance: -1, Key: "k", Start: at(100), End: at(101)})
	wantEffects(t, h, "")
}

func TestEffects_Identity(t *testing.T) {
	h := NewHistory()
	e := withEvents(h, "e1", 1, "k", 10, 0, 50, ExecOK, "a")
	h.AddDelivery(Delivery{Stream: "a", EntryID: "1-1", EventID: "r:k/11/0", Data: EventData(e.ID, 0), At: at(60)})
	wantEffects(t, h, "does not match")
	h.AddDelivery(Delivery{Stream: "a", EntryID: "1-2", EventID: "x", Data: "e9/0", At: at(60)})
	wantEffects(t, h, "no execution declared")
}
