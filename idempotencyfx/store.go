package idempotencyfx

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/idemscript"
	"github.com/redisfx/redisfx/internal/nodeclient"
)

// State is the state of an idempotency record.
type State string

// Record states; NotReplayable is a completed outcome whose response could not be recorded.
const (
	StateNone          State = ""
	StateInProgress    State = "p"
	StateCompleted     State = "c"
	StateFailed        State = "f"
	StateNotReplayable State = "u"
)

var stateNames = map[State]string{StateNone: "none", StateInProgress: "in_progress", StateCompleted: "completed",
	StateFailed: "failed", StateNotReplayable: "not_replayable"}

// String implements fmt.Stringer.
func (s State) String() string {
	if name, ok := stateNames[s]; ok {
		return name
	}
	return "unknown(" + string(s) + ")"
}

// store runs the record scripts on one Redis client; acks > 0 makes writes
// wait for that many replicas (WAIT). Without acks, concurrent claims and
// completions are batched.
type store struct {
	rdb        redis.UniversalClient
	acks       int
	ackTimeout time.Duration
	batchers   map[*redis.Script]*batcher // of Claim and Complete
}

func newStore(rdb redis.UniversalClient, acks int, ackTimeout time.Duration) store {
	s := store{rdb: rdb, acks: acks, ackTimeout: ackTimeout, batchers: map[*redis.Script]*batcher{}}
	for _, script := range []*redis.Script{idemscript.Claim, idemscript.Complete} {
		s.batchers[script] = &batcher{rdb: rdb, cluster: nodeclient.Cluster(rdb), script: script, queues: map[string]*queue{}}
	}
	return s
}

// claimKind is the first element of the reply of idemscript.Claim.
type claimKind byte

// Claim replies.
const (
	claimNew           claimKind = 'n' // no record: ours now, fencing token 1
	claimTakeover      claimKind = 't' // an expired lease taken over, with the next token
	claimCompleted     claimKind = 'c' // completed: the encoded response follows
	claimInProgress    claimKind = 'p' // another owner's lease runs: the time left and that owner follow
	claimFailed        claimKind = 'f' // a failed record: its time to live follows
	claimNotReplayable claimKind = 'u' // completed, not replayable: its time to live follows
	claimMismatch      claimKind = 'm' // the record has another fingerprint
	claimWithdrawn     claimKind = 'x' // this owner's claim was withdrawn (see withdrawClaim)
)

// claim is the reply of claimScript.
type claim struct {
	kind  claimKind
	token int64         // fencing token for n and t
	resp  string        // encoded response for c
	wait  time.Duration // lease left for p, record TTL for f and u
	owner string        // for p: the owner token of the attempt that runs
}

// claim runs the Claim script. unreplicated reports a write that did not
// reach ReplicaAcks replicas in time: the claim stands.
func (s store) claim(ctx context.Context, key, fp, owner string, lease time.Duration, wait bool) (c claim, unreplicated bool, err error) {
	call := &scriptCall{keys: [1]string{key}, strs: [2]string{fp, owner}, num: lease.Milliseconds()}
	w := "0"
	if wait {
		w = "1"
	}
	call.args = [4]any{&call.strs[0], &call.strs[1], &call.num, w}
	wrote := func(cmd *redis.Cmd) bool {
		v, _ := cmd.Slice()
		return len(v) > 0 && (v[0] == string(claimNew) || v[0] == string(claimTakeover))
	}
	cmd, unreplicated, err := s.run(ctx, idemscript.Claim, call, wrote)
	if err != nil {
		return claim{}, false, err
	}
	v, err := cmd.Slice()
	if err != nil {
		return claim{}, false, err
	}
	kind, _ := v[0].(string) // the script's: one letter first
	c = claim{kind: claimKind(kind[0])}
	if len(v) > 1 {
		switch x := v[1].(type) {
		case int64:
			if c.kind == claimNew || c.kind == claimTakeover {
				c.token = x
			} else {
				c.wait = time.Duration(x) * time.Millisecond
			}
		case string:
			c.resp = x
		}
	}
	if c.kind == claimInProgress && len(v) > 2 {
		c.owner, _ = v[2].(string)
	}
	return c, unreplicated, nil
}

// scriptCall is a script's keys and arguments in one allocation (go-redis
// writes a *string or *int64 as its value).
type scriptCall struct {
	keys [1]string
	args [4]any
	strs [2]string // the string arguments args points to
	num  int64     // the number argument args points to
}

// run runs the script call. With ReplicaAcks it runs on a connection to the
// key's master, following MOVED and ASK, and WAITs there when wrote says the
// script wrote (WAIT covers its own connection's writes only).
func (s store) run(ctx context.Context, script *redis.Script, call *scriptCall, wrote func(*redis.Cmd) bool) (cmd *redis.Cmd, unreplicated bool, err error) {
	if b := s.batchers[script]; b != nil && s.acks == 0 {
		cmd = b.run(ctx, call.keys[:], call.args[:])
		return cmd, false, cmd.Err()
	}
	return s.runArgs(ctx, script, call.keys[:], call.args[:], wrote)
}

// runArgs is run with keys and arguments of any number.
func (s store) runArgs(ctx context.Context, script *redis.Script, keys []string, args []any, wrote func(*redis.Cmd) bool) (cmd *redis.Cmd, unreplicated bool, err error) {
	key := keys[0]
	if s.acks == 0 {
		cmd = script.Run(ctx, s.rdb, keys, args...)
		return cmd, false, cmd.Err()
	}
	node, err := nodeclient.ForKey(ctx, s.rdb, key)
	if err != nil {
		return nil, false, err
	}
	if node == nil {
		return nil, false, fmt.Errorf("idempotencyfx: ReplicaAcks needs a standalone, Sentinel or Cluster client, not %T", s.rdb)
	}
	cmd, conn, release := s.runFollowingRedirects(ctx, node, script, keys, args)
	defer release()
	if err := cmd.Err(); err != nil {
		return cmd, false, err
	}
	if wrote(cmd) {
		if acked, err := conn.Wait(ctx, s.acks, s.ackTimeout).Result(); err != nil || acked < int64(s.acks) {
			unreplicated = true
		}
	}
	return cmd, unreplicated, nil
}

// runFollowingRedirects runs script on a connection of node, following MOVED
// and ASK; it returns the connection that ran it and how to release it.
func (s store) runFollowingRedirects(ctx context.Context, node *redis.Client, script *redis.Script, keys []string, args []any) (*redis.Cmd, *redis.Conn, func()) {
	conn := node.Conn()
	var redirected *redis.Client // of the node Redis sent the script to
	release := func() {
		_ = conn.Close()
		if redirected != nil {
			_ = redirected.Close()
		}
	}
	var cmd *redis.Cmd
	asking := false
	for redirects := 0; ; redirects++ {
		if asking {
			_, _ = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Do(ctx, "ASKING")
				cmd = script.Eval(ctx, p, keys, args...) // EVAL: a pipeline does not fall back from EVALSHA
				return nil
			})
		} else {
			cmd = script.Run(ctx, conn, keys, args...)
		}
		movedTo, moved := redis.IsMovedError(cmd.Err())
		askedTo, asked := redis.IsAskError(cmd.Err())
		if !moved && !asked || redirects == maxRedirects {
			return cmd, conn, release
		}
		if c := nodeclient.Cluster(s.rdb); moved && c != nil {
			c.ReloadState(context.Background()) // a MOVED the Cluster client did not see
		}
		release()
		to := movedTo
		if asked {
			to = askedTo
		}
		redirected = nodeclient.OneConn(node, to)
		conn, asking = redirected.Conn(), asked
	}
}

// maxRedirects is go-redis's ClusterOptions.MaxRedirects default.
const maxRedirects = 3

// abandon runs the Abandon script: true when the claim had landed and was
// withdrawn, false when a marker now refuses it.
func (s store) abandon(ctx context.Context, key, owner string, keep time.Duration) (bool, error) {
	n, err := idemscript.Abandon.Run(ctx, s.rdb, []string{key}, owner, keep.Milliseconds()).Int()
	return n == 1, err
}

// completion is the reply of the Complete script.
type completion int

const (
	completionRefused     completion = 0 // another owner holds the record: nothing written
	completionRecorded    completion = 1
	completionUnpublished completion = 2 // recorded; the notification to waiters failed
)

// complete runs the Complete script, WAITing as a claim does. ev, when not
// nil, commits events with the outcome: ids are those of the events the
// script appended, relay says it kept them for the relay instead.
func (s store) complete(ctx context.Context, key, owner string, state State, resp []byte, ttl time.Duration, ev *eventCommit) (done completion, ids []any, relay, unreplicated bool, err error) {
	wrote := func(cmd *redis.Cmd) bool { return cmd.Val() != int64(completionRefused) }
	var cmd *redis.Cmd
	call := &scriptCall{keys: [1]string{key}, strs: [2]string{owner, string(state)}, num: ttl.Milliseconds()}
	call.args = [4]any{&call.strs[0], &call.strs[1], resp, &call.num}
	if ev == nil {
		cmd, unreplicated, err = s.run(ctx, idemscript.Complete, call, wrote)
	} else {
		copy(ev.args, call.args[:])
		cmd, unreplicated, err = s.runArgs(ctx, idemscript.Complete, ev.keys, ev.args, wrote)
	}
	if err != nil {
		return completionRefused, nil, false, false, err
	}
	switch v := cmd.Val().(type) {
	case int64:
		return completion(v), nil, false, unreplicated, nil
	case []any:
		if n, ok := v[0].(int64); ok {
			return completion(n), v[1:], len(v) == 1, unreplicated, nil
		}
	}
	return completionRefused, nil, false, false, fmt.Errorf("unexpected completion reply %v", cmd.Val())
}

// Record is a stored idempotency record, as read by Service.Get.
type Record struct {
	Key          string // the Redis key
	State        State
	Fingerprint  string
	FencingToken int64 // see FencingToken
	// LeaseLeft is the time left on an in-progress lease.
	LeaseLeft time.Duration
	// TTL is the time until the record expires; -1 when it never does.
	TTL time.Duration
	// Response is the recorded response of a completed record.
	Response *Response
}

func (s store) get(ctx context.Context, key string) (*Record, error) {
	var hm *redis.SliceCmd
	var pttl *redis.DurationCmd
	var now *redis.TimeCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hm = p.HMGet(ctx, key, "s", "f", "n", "l", "r")
		pttl = p.PTTL(ctx, key)
		now = p.Time(ctx)
		return nil
	})
	if err != nil {
		return nil, err
	}
	v := hm.Val()
	st, _ := v[0].(string)
	if st == "" {
		return nil, nil //nolint:nilnil // no record is not an error: Service.Get documents nil for it
	}
	rec := &Record{Key: key, State: State(st), TTL: pttl.Val()}
	rec.Fingerprint, _ = v[1].(string)
	if n, ok := v[2].(string); ok {
		rec.FencingToken, _ = strconv.ParseInt(n, 10, 64)
	}
	if l, ok := v[3].(string); ok {
		if ms, err := strconv.ParseInt(l, 10, 64); err == nil {
			rec.LeaseLeft = time.Duration(ms)*time.Millisecond - time.Duration(now.Val().UnixMilli())*time.Millisecond
		}
	}
	if r, ok := v[4].(string); ok && rec.State == StateCompleted {
		resp, err := decodeResponse([]byte(r))
		if err != nil {
			return nil, err
		}
		rec.Response = &resp
	}
	return rec, nil
}
