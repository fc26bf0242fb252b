package idemcheck

// Effects: the events executions declare through idempotencyfx's outbox
// (Emit), and the stream entries the checker read. The driver records each
// execution's declared events (Exec.Events), every entry it reads from the
// streams (AddDelivery) and the executions it saw recorded (Recorded);
// CheckEffects compares them.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Delivery is one stream entry the checker read.
type Delivery struct {
	Stream  string
	EntryID string    // the entry's id in its stream
	EventID string    // its event_id field
	Data    string    // its data field: EventData of the event
	At      time.Time // when the checker read it
}

// EventData is the data of event i of execution execID: each event names
// its execution and its index.
func EventData(execID string, i int) string { return execID + "/" + strconv.Itoa(i) }

// EventID is the event_id the outbox gives event i of e: "<record key>/<fencing token>/<index>".
func EventID(e *Exec, i int) string {
	return e.Record + "/" + strconv.FormatInt(e.Token, 10) + "/" + strconv.Itoa(i)
}

// AddDelivery records a stream entry read. Each stream's entries must be
// added in the stream's order.
func (h *History) AddDelivery(d Delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliveries = append(h.deliveries, d)
}

// Recorded notes that execution id's outcome was seen in its record (state
// completed or not replayable, with its fencing token): its events were
// committed.
func (h *History) Recorded(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recorded[id] = true
}

// EffectStats are the figures of the events of a run.
type EffectStats struct {
	Declared   int // events declared by executions
	Delivered  int // stream entries read
	Executions int // executions with events delivered
	Recorded   int // executions known recorded (seen in their record, replayed, or delivered)
	Seen       int // executions seen recorded in their record (Recorded)
	Excused    int // recorded executions whose missing events a lost record excuses
	// From an execution's end to the reading of its first event.
	LagP50, LagP99, LagMax time.Duration
}

func (s EffectStats) String() string {
	return fmt.Sprintf("events: %d declared, %d delivered, of %d executions (%d known recorded, %d of them seen in their record; %d lost with their record); lag to the first event p50 %v p99 %v max %v",
		s.Declared, s.Delivered, s.Executions, s.Recorded, s.Seen, s.Excused, s.LagP50, s.LagP99, s.LagMax)
}

// effects is the history's events, indexed.
type effects struct {
	byData   map[string][]int      // event data -> its deliveries
	byExec   map[*Exec][]int       // its deliveries
	strange  []int                 // deliveries that name no declared event
	recorded map[*Exec]string      // executions known recorded, and how
	records  map[[2]string][]*Exec // the executions of a record with events delivered, by token
}

func (h *History) effects() effects {
	x := effects{byData: map[string][]int{}, byExec: map[*Exec][]int{}, recorded: map[*Exec]string{}, records: map[[2]string][]*Exec{}}
	for i, d := range h.deliveries {
		e, _ := h.eventOf(d.Data)
		if e == nil {
			x.strange = append(x.strange, i)
			continue
		}
		x.byData[d.Data] = append(x.byData[d.Data], i)
		if x.byExec[e] == nil {
			k := [2]string{e.Scope, e.Key}
			x.records[k] = append(x.records[k], e)
			x.recorded[e] = "events delivered"
		}
		x.byExec[e] = append(x.byExec[e], i)
	}
	for _, r := range h.reqs {
		if e := h.execs[r.ExecID]; e != nil && r.Replayed && x.recorded[e] == "" {
			x.recorded[e] = "replayed"
		}
	}
	for id := range h.recorded {
		if e := h.execs[id]; e != nil && x.recorded[e] == "" {
			x.recorded[e] = "seen in its record"
		}
	}
	for _, execs := range x.records {
		slices.SortFunc(execs, func(a, b *Exec) int { return cmpInt(a.Token, b.Token) })
	}
	return x
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// eventOf is the execution and index an event's data names (nil if none
// declared it).
func (h *History) eventOf(data string) (*Exec, int) {
	id, n, ok := strings.Cut(data, "/")
	i, err := strconv.Atoi(n)
	e := h.execs[id]
	if !ok || err != nil || e == nil || i < 0 || i >= len(e.Events) {
		return nil, 0
	}
	return e, i
}

// CheckEffects compares the stream entries read with the executions, once
// everything stopped and the outbox had time to deliver. The rules, which
// number on from Check's:
//
//  6. Identity: every entry is an event an execution declared (its data),
//     with that event's id (record key, the execution's fencing token, its
//     index), in the stream it was declared for.
//  7. Once: no event is read twice, unless its delivery marker may have
//     been lost between the two readings (an eviction; a failover where
//     Bounds.Failover says a restart keeps a replica's copy).
//  8. Only what was recorded: no event of a failed execution (5xx, an
//     error, a panic, Goexit) is delivered; of a record's executions, two
//     have their events delivered only if the later started after the
//     earlier's record could have ended (DefaultTTL after it ended, or a
//     Delete, a restart, an eviction in between). A taken-over or refused
//     owner's events are never delivered.
//  9. All of them, in order: an execution known recorded (seen completed
//     with its token in its record, replayed, or with any event delivered)
//     has every event delivered; each stream holds an execution's events in
//     the order declared, and a record's executions' in token order. Only
//     the loss of the record during its life (a restart, an eviction or a
//     Delete between its start and DefaultTTL after it ended) excuses a
//     missing event: the pending events are in the record.
func (h *History) CheckEffects(b Bounds) ([]string, EffectStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	x := h.effects()
	var out []string
	bad := func(e *Exec, format string, args ...any) {
		prefix := ""
		if e != nil {
			prefix = fmt.Sprintf("record %q/%q: ", e.Scope, e.Key)
		}
		out = append(out, prefix+fmt.Sprintf(format, args...))
	}
	entry := func(i int) string {
		d := h.deliveries[i]
		return fmt.Sprintf("%s %s (event_id %s, read %s)", d.Stream, d.EntryID, d.EventID, ts(d.At))
	}
	// 6.
	for _, i := range x.strange {
		bad(nil, "entry %s with data %q: no execution declared such an event", entry(i), h.deliveries[i].Data)
	}
	for e, idx := range x.byExec {
		for _, i := range idx {
			d := h.deliveries[i]
			_, n := h.eventOf(d.Data)
			if want := EventID(e, n); d.EventID != want || d.Stream != e.Events[n] {
				bad(e, "entry %s of execution %s's event %d does not match it: declared for %s with event_id %s", entry(i), e.ID, n, e.Events[n], want)
			}
		}
	}
	// 7.
	for data, idx := range x.byData {
		if len(idx) < 2 {
			continue
		}
		e, _ := h.eventOf(data)
		first, last := h.deliveries[idx[0]], h.deliveries[idx[len(idx)-1]]
		if !h.markerLost(first.At.Add(-b.Margin), last.At, b) {
			bad(e, "event %s of execution %s delivered %d times: %s, then %s", data, e.ID, len(idx), entry(idx[0]), entry(idx[1]))
		}
	}
	// 8.
	for e := range x.byExec {
		if failed(e.Kind) {
			bad(e, "events of execution %s delivered, whose outcome (%s, token %d) is never recorded: %s", e.ID, e.Kind, e.Token, entry(x.byExec[e][0]))
		}
	}
	for k, all := range x.records {
		// Pairs of executions whose outcomes could be recorded (the failed
		// ones are reported above).
		execs := slices.DeleteFunc(slices.Clone(all), func(e *Exec) bool { return failed(e.Kind) })
		for j := 1; j < len(execs); j++ {
			a, bx := execs[j-1], execs[j]
			ended := !bx.Start.Before(a.End.Add(b.DefaultTTL - b.StoreTimeout))
			if !ended && !h.recordLost(k, a.Start.Add(-b.StoreTimeout), bx.Start) {
				bad(bx, "events of two executions of one record delivered: %s (token %d, %s, ran [%s, %s]) and %s (token %d, %s, started %s), which ran while the first's outcome held the record",
					a.ID, a.Token, a.Kind, ts(a.Start), ts(a.End), bx.ID, bx.Token, bx.Kind, ts(bx.Start))
			}
		}
	}
	// 9.
	st := EffectStats{Delivered: len(h.deliveries), Executions: len(x.byExec), Recorded: len(x.recorded), Seen: len(h.recorded)}
	for _, e := range h.order {
		st.Declared += len(e.Events)
		how := x.recorded[e]
		if how == "" || len(e.Events) == 0 {
			continue
		}
		var missing []int
		for n := range e.Events {
			if len(x.byData[EventData(e.ID, n)]) == 0 {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if h.recordLost([2]string{e.Scope, e.Key}, e.Start.Add(-b.StoreTimeout), e.End.Add(b.DefaultTTL+b.Margin)) {
			st.Excused++
			continue
		}
		bad(e, "execution %s (%s, token %d, ran [%s, %s]) is recorded (%s), but events %v of its %d were never delivered",
			e.ID, e.Kind, e.Token, ts(e.Start), ts(e.End), how, missing, len(e.Events))
	}
	out = append(out, h.checkOrder(x, entry)...)
	st.LagP50, st.LagP99, st.LagMax = h.lags(x)
	return out, st
}

// checkOrder is rule 9's order: by index within an execution, by token
// across a record's executions, in each stream.
func (h *History) checkOrder(x effects, entry func(int) string) []string {
	var out []string
	// firsts are an execution's first reading of each event, per stream.
	firsts := func(e *Exec) map[string][]int {
		m := map[string][]int{}
		for n, s := range e.Events {
			if idx := x.byData[EventData(e.ID, n)]; len(idx) > 0 {
				m[s] = append(m[s], idx[0])
			}
		}
		return m
	}
	for k, execs := range x.records {
		var prev map[string][]int
		var prevExec *Exec
		for _, e := range execs {
			cur := firsts(e)
			for s, idx := range cur {
				if !slices.IsSorted(idx) {
					out = append(out, fmt.Sprintf("record %q/%q: the events of execution %s are out of order in stream %s (%d entries, the first %s)",
						k[0], k[1], e.ID, s, len(idx), entry(idx[0])))
				}
				if p := prev[s]; len(p) > 0 && slices.Max(p) > slices.Min(idx) {
					out = append(out, fmt.Sprintf("record %q/%q: in stream %s, events of execution %s (token %d) come after those of the later %s (token %d): %s",
						k[0], k[1], s, prevExec.ID, prevExec.Token, e.ID, e.Token, entry(slices.Max(p))))
				}
			}
			prev, prevExec = cur, e
		}
	}
	return out
}

// lags are the percentiles of the time from an execution's end to the
// reading of its first event.
func (h *History) lags(x effects) (p50, p99, maxLag time.Duration) {
	var lags []time.Duration
	for e, idx := range x.byExec {
		lags = append(lags, h.deliveries[idx[0]].At.Sub(e.End))
	}
	if len(lags) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lags)
	return lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1]
}

// recordLost reports a fault in [from, to] that may have taken record k
// with the events it held: a restart, an eviction, its Delete.
func (h *History) recordLost(k [2]string, from, to time.Time) bool {
	for _, f := range h.faults {
		if f.End.Before(from) || f.Start.After(to) {
			continue
		}
		switch f.Kind {
		case FaultRestart, FaultEviction:
			return true
		case FaultDelete:
			if f.Scope == k[0] && f.Key == k[1] {
				return true
			}
		}
	}
	return false
}

// markerLost reports a fault in [from, to] that may have taken a delivery
// marker while its record still held the events.
func (h *History) markerLost(from, to time.Time, b Bounds) bool {
	for _, f := range h.faults {
		if f.End.Before(from) || f.Start.After(to) {
			continue
		}
		if f.Kind == FaultEviction || f.Kind == FaultRestart && b.Failover {
			return true
		}
	}
	return false
}

// declared says, for a timeline, the events e declared and whether it was
// seen recorded.
func declared(e *Exec, recorded bool) string {
	if len(e.Events) == 0 {
		return ""
	}
	s := fmt.Sprintf("; declared events to %v", e.Events)
	if recorded {
		s += "; seen recorded"
	}
	return s
}
