package idempotencyfx

import "time"

// flock is the duplicates of one record and fingerprint waiting in this
// process. One at a time, the lead, claims, watches the record's channel
// and polls for all, and every member takes the answer it gets; a lease is
// the lead's alone, and the others wait on for the work it runs. A member
// leaves on its own deadline or when its client goes; a lead that leaves
// frees the lead for another member.
type flock struct {
	key      flockKey
	members  int
	led      bool          // a member leads
	changed  chan struct{} // closed when answered or the lead is free (made when a member waits)
	answered bool
	c        claim // the answer; before it, the attempt last seen running (its lease left)
	// The lead's, passed on from lead to lead:
	w        *watch          // from the first claim that found an attempt running
	sig      *signal         // the next message, kept until it fires
	polledOn <-chan struct{} // the confirmation already answered with a poll
	pollAt   time.Time       // the next poll
}

type flockKey struct{ record, fp string }

// join adds a member to the flock of record and fp; first when made for it
// (it then leads).
func (s *Service) join(record, fp string) (f *flock, first bool) {
	s.flockMu.Lock()
	defer s.flockMu.Unlock()
	k := flockKey{record, fp}
	if f = s.flocks[k]; f == nil || f.answered { // one answered: claim anew
		f = &flock{key: k, led: true, c: claim{wait: s.cfg.LockTimeout}}
		s.flocks[k] = f
	}
	f.members++
	return f, f.members == 1
}

// leave removes a member; the last ends the flock.
func (s *Service) leave(f *flock) {
	s.flockMu.Lock()
	defer s.flockMu.Unlock()
	if f.members--; f.members > 0 {
		return
	}
	if s.flocks[f.key] == f {
		delete(s.flocks, f.key)
	}
	if f.w != nil {
		f.w.release()
	}
}

// settle records the lead's claim c for f; leased reports the lead's own
// lease. A failed claim answers only the lead: a store error is its call's,
// which may predate a member's arrival, and the member claims on its own.
func (s *Service) settle(f *flock, c claim, err error, owner string) (leased bool) {
	s.flockMu.Lock()
	defer s.flockMu.Unlock()
	switch {
	case err != nil: // the lead's own: the members claim on their own (a failure is no answer about the record)
		return false
	case c.kind == claimNew || c.kind == claimTakeover: // the others wait for the lead's work
		f.c, f.pollAt = claim{kind: claimInProgress, wait: s.cfg.LockTimeout, owner: owner}, time.Time{}
		return true
	case c.kind == claimInProgress:
		f.c, f.pollAt = c, time.Now().Add(s.pollAfter(c.wait))
		if f.w == nil {
			f.w = s.notify.watch(f.key.record)
			f.sig = f.w.signal()
		}
		return false
	}
	f.answered, f.c = true, c
	f.free()
	return false
}

// handOver frees the lead for another member.
func (s *Service) handOver(f *flock) {
	s.flockMu.Lock()
	defer s.flockMu.Unlock()
	f.free()
}

// free frees the lead and wakes the members waiting for a change. flockMu is held.
func (f *flock) free() {
	f.led = false
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}
