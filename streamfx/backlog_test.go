package streamfx

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/obstest"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// While Streams runs, a scrape serves the backlog read in the background:
// with Redis frozen it answers at once (median within 50ms), and stream_length and
// stream_consumer_lag keep their last values instead of vanishing (which
// would silently resolve the lag and dead-letter alerts).
func TestMetrics_BacklogScrapeNeverWaitsForRedis_AndKeepsTheLastValue(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	s, reg := backlogStreams(t, "redis://"+proxy.Addr(), 50*time.Millisecond)
	stream := redistest.Prefix(t) + "backlog"
	ctx := context.Background()
	srv.Client().XGroupCreateMkStream(ctx, stream, s.Config().Group, "0")
	for range 3 {
		if _, err := s.Publish(ctx, stream, []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	read := readings(s)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-read: // the first reading, which a scrape serves
	case <-time.After(5 * time.Second):
		t.Fatal("no background reading 5s after Start")
	}
	if n := obstest.Value(t, reg, "stream_length", "stream", stream); n != 3 {
		t.Fatalf("stream_length = %v after Start, want 3", n)
	}

	proxy.SetMode(faultproxy.Freeze)
	defer proxy.SetMode(faultproxy.Forward)
	// Background reads time out meanwhile (every 50ms, a second each). A
	// scrape that waited for one would take a second: the median is bound
	// to 50ms, the slowest (a loaded machine) to 500ms.
	var took []time.Duration
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		began := time.Now()
		length := obstest.Value(t, reg, "stream_length", "stream", stream)
		lag := obstest.Value(t, reg, "stream_consumer_lag", "stream", stream, "group", s.Config().Group)
		took = append(took, time.Since(began))
		if length != 3 || lag != 3 {
			t.Fatalf("with Redis frozen stream_length = %v, stream_consumer_lag = %v, want the last values 3 and 3", length, lag)
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	median, slowest := took[len(took)/2], took[len(took)-1]
	t.Logf("with Redis frozen: %d scrapes, median %v, slowest %v", len(took), median, slowest)
	if median > 50*time.Millisecond || slowest > 500*time.Millisecond {
		t.Errorf("with Redis frozen, scrapes took %v (median, bound 50ms), slowest %v (bound 500ms)", median, slowest)
	}
}

// readings signals each background reading of s's backlog (set before Start).
func readings(s *Streams) <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.obs.backlog.afterRead = func() {
		select {
		case ch <- struct{}{}:
		default: // one not yet taken already says "a reading happened"
		}
	}
	return ch
}

// present reports whether reg exports stream_length{stream}.
func present(t *testing.T, reg prometheus.Gatherer, stream string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stream_length" {
			continue
		}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if lp.GetName() == "stream" && lp.GetValue() == stream {
					return true
				}
			}
		}
	}
	return false
}

// A publish-only application (no Handle) learns its streams on first
// publish, after the background reader's first reading. A scrape then
// used to read Redis itself: with Redis frozen it took a second (an
// adversary measured 1.001s). Now a scrape never calls Redis: a stream not
// read yet has no backlog series, and the reader reads a new stream at
// once (not at its next interval) and the series appears with that reading.
func TestMetrics_PublisherOnly_ScrapeBeforeFirstReadingNeverWaitsForRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	proxy := faultproxy.Start(t, srv.Addr())
	s, reg := backlogStreams(t, "redis://"+proxy.Addr(), time.Hour) // only Start and new streams trigger a reading
	read := readings(s)
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-read: // the first reading: no stream known, nothing read
	case <-time.After(5 * time.Second):
		t.Fatal("no background reading after Start")
	}

	proxy.SetMode(faultproxy.Freeze)
	frozen := true
	defer func() {
		if frozen {
			proxy.SetMode(faultproxy.Forward)
		}
	}()
	stream := redistest.Prefix(t) + "orders"
	published := make(chan struct{})
	go func() {
		defer close(published)
		_, _ = s.Publish(ctx, stream, []byte("m")) // held: times out after StoreTimeout
	}()
	// Scrape every 20ms for 1.5s: a scrape that read Redis would wait its
	// one-second timeout.
	var took []time.Duration
	known := 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if len(s.obs.known()) > 0 {
			known++
		}
		began := time.Now()
		if present(t, reg, stream) {
			t.Fatalf("stream_length{stream=%q} exported with Redis frozen before any reading of it", stream)
		}
		took = append(took, time.Since(began))
	}
	if known < 5 {
		t.Fatalf("only %d scrapes after the publish made the stream known", known)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	median, slowest := took[len(took)/2], took[len(took)-1]
	t.Logf("with Redis frozen: %d scrapes (%d with the stream known), median %v, slowest %v", len(took), known, median, slowest)
	if median > 50*time.Millisecond || slowest > 200*time.Millisecond {
		t.Errorf("with Redis frozen, scrapes took %v (median, bound 50ms), slowest %v (bound 200ms)", median, slowest)
	}

	proxy.SetMode(faultproxy.Forward)
	frozen = false
	<-published
	// A stream first published with Redis answering is read at once: its
	// series (and the earlier stream's) appear without waiting the interval.
	other := redistest.Prefix(t) + "invoices"
	if _, err := s.Publish(ctx, other, []byte("m")); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for !present(t, reg, other) {
		select {
		case <-read:
		case <-deadline:
			t.Fatalf("stream_length{stream=%q} not exported 5s after its first publish", other)
		}
	}
	if n := obstest.Value(t, reg, "stream_length", "stream", other); n != 1 {
		t.Errorf("stream_length{stream=%q} = %v, want 1", other, n)
	}
	if n := obstest.Value(t, reg, "stream_length", "stream", other+DLQSuffix); n != 0 {
		t.Errorf("stream_length{stream=%q} = %v, want 0", other+DLQSuffix, n)
	}
	obstest.Value(t, reg, "stream_length", "stream", stream) // read too (1 or 0: the held publish may or may not have landed)
}

// Before Start nothing is read: a scrape shows no backlog series (and
// never calls Redis), even for streams already known.
func TestMetrics_NoBacklogSeriesBeforeStart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stream := redistest.Prefix(t) + "early"
	reg := prometheus.NewRegistry()
	s := newStreams(t, srv, Config{}, WithRegisterer(reg))
	if _, err := s.Publish(context.Background(), stream, []byte("m")); err != nil {
		t.Fatal(err)
	}
	if present(t, reg, stream) {
		t.Errorf("stream_length{stream=%q} exported before Start", stream)
	}
}

// lagSeries reports whether reg has stream_consumer_lag for stream and group.
func lagSeries(t *testing.T, reg prometheus.Gatherer, stream, group string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stream_consumer_lag" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stream"] == stream && labels["group"] == group {
				return true
			}
		}
	}
	return false
}

// Found by an adversary: when Redis answered that the stream (or the
// group) no longer exists, the lag kept its last value for good, so the
// lag alerts fired until a restart while stream_length read 0. The last
// value holds only while Redis does not answer; a stream deleted, expired
// under Retention or a group destroyed makes the series absent.
func TestMetrics_LagAbsentOnceTheStreamOrGroupIsGone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s, reg := backlogStreams(t, srv.URL(), 20*time.Millisecond)
	ctx := context.Background()
	group := s.Config().Group
	deleted, destroyed := redistest.Prefix(t)+"deleted", redistest.Prefix(t)+"destroyed"
	for _, st := range []string{deleted, destroyed} {
		srv.Client().XGroupCreateMkStream(ctx, st, group, "0")
		for range 5 {
			if _, err := s.Publish(ctx, st, []byte("m")); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := readings(s)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nextReading := func() {
		t.Helper()
		select {
		case <-read:
		case <-time.After(5 * time.Second):
			t.Fatal("no background reading within 5s")
		}
	}
	nextReading()
	for _, st := range []string{deleted, destroyed} {
		if n := obstest.Value(t, reg, "stream_consumer_lag", "stream", st, "group", group); n != 5 {
			t.Fatalf("%s: lag %v, want 5", st, n)
		}
	}
	srv.Client().Del(ctx, deleted)
	srv.Client().XGroupDestroy(ctx, destroyed, group)
	// A reading may have begun before the changes: the series must be gone
	// after a few readings (a reading every 20ms), not at the next one.
	for i := 0; lagSeries(t, reg, deleted, group) || lagSeries(t, reg, destroyed, group); i++ {
		if i == 50 {
			t.Fatalf("stream_consumer_lag still exported (deleted stream: %v, destroyed group: %v) 50 readings after Redis said they are gone",
				lagSeries(t, reg, deleted, group), lagSeries(t, reg, destroyed, group))
		}
		nextReading()
	}
	if n := obstest.Value(t, reg, "stream_length", "stream", deleted); n != 0 {
		t.Errorf("stream_length of the deleted stream = %v, want 0", n)
	}
}

// backlogStreams is a Streams on url (StoreTimeout 1s) with its metrics in
// reg, reading the backlog every interval once started; stopped when t ends.
func backlogStreams(t *testing.T, url string, every time.Duration) (*Streams, *prometheus.Registry) {
	t.Helper()
	c, err := storefx.New("default", storefx.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	reg := prometheus.NewRegistry()
	s, err := New(c, Config{StoreTimeout: time.Second}, WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	s.obs.backlog.every = every
	return s, reg
}

// nextReadingOf returns a function that waits for s's next background
// reading (5s at most); call it before Start.
func nextReadingOf(t *testing.T, s *Streams) func() {
	read := readings(s)
	return func() {
		t.Helper()
		select {
		case <-read:
		case <-time.After(5 * time.Second):
			t.Fatal("no background reading within 5s")
		}
	}
}

// Found by an adversary: while Redis ran a long script (BUSY to every
// other command), stream_length kept its last value but
// stream_consumer_lag vanished: any error Redis answered to XINFO GROUPS
// was taken for "the stream is gone". Only "no such key" (or a key that is
// no longer a stream) now removes the series; BUSY, LOADING and the like
// keep the last reading, as no answer does.
func TestMetrics_LagKeptWhileRedisAnswersBusy(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t, redistest.WithArgs("--busy-reply-threshold", "50"))
	s, reg := backlogStreams(t, srv.URL(), 20*time.Millisecond)
	ctx := context.Background()
	group := s.Config().Group
	stream := redistest.Prefix(t) + "busy"
	srv.Client().XGroupCreateMkStream(ctx, stream, group, "0")
	for range 5 {
		if _, err := s.Publish(ctx, stream, []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	nextReading := nextReadingOf(t, s)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nextReading()
	if n := obstest.Value(t, reg, "stream_consumer_lag", "stream", stream, "group", group); n != 5 {
		t.Fatalf("lag %v, want 5", n)
	}
	// A script that never ends: Redis answers BUSY to every other command
	// until SCRIPT KILL.
	busy := srv.Client()
	scriptDone := make(chan error, 1)
	go func() { scriptDone <- busy.Eval(ctx, "while true do end", nil).Err() }()
	defer func() {
		for srv.Client().Do(ctx, "SCRIPT", "KILL").Err() != nil && srv.Client().Ping(ctx).Err() != nil {
			time.Sleep(10 * time.Millisecond)
		}
		<-scriptDone
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := srv.Client().XLen(ctx, stream).Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis does not answer BUSY (last: %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 5 { // readings Redis answered BUSY
		nextReading()
	}
	if !present(t, reg, stream) {
		t.Error("stream_length vanished while Redis answered BUSY")
	}
	if !lagSeries(t, reg, stream, group) {
		t.Fatal("stream_consumer_lag vanished while Redis answered BUSY: the lag alerts would resolve during the outage")
	}
	if n := obstest.Value(t, reg, "stream_consumer_lag", "stream", stream, "group", group); n != 5 {
		t.Errorf("lag %v while Redis answered BUSY, want the last reading 5", n)
	}
}

// Found by an adversary: after an XDEL of an entry the group had not read,
// Redis 7 answers the group's lag as NULL (until the group reads past it),
// and stream_consumer_lag kept the reading before the XDEL (2 with 1001
// entries undelivered); a stream first read in that state had no series.
// The undelivered entries are now counted (up to 10001) when Redis cannot
// give the lag.
func TestMetrics_LagCountedWhenRedisCannotGiveIt_AfterAnXDEL(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	s, reg := backlogStreams(t, srv.URL(), 20*time.Millisecond)
	ctx := context.Background()
	group := s.Config().Group
	stream := redistest.Prefix(t) + "xdel"
	raw := srv.Client()
	raw.XGroupCreateMkStream(ctx, stream, group, "0")
	var first []string
	for range 2 {
		id, err := s.Publish(ctx, stream, []byte("m"))
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, id)
	}
	nextReading := nextReadingOf(t, s)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nextReading()
	lag := func() float64 { return obstest.Value(t, reg, "stream_consumer_lag", "stream", stream, "group", group) }
	if n := lag(); n != 2 {
		t.Fatalf("lag %v, want 2", n)
	}
	// At once (MULTI): 1000 more entries, and the second entry deleted.
	if _, err := raw.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for range 1000 {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{FieldData, "m"}})
		}
		p.XDel(ctx, stream, first[1])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// want is the lag once a reading has seen the state it is called in.
	settles := func(want float64, what string) {
		t.Helper()
		groups, err := raw.XInfoGroups(ctx, stream).Result()
		if err != nil || groups[0].Lag != -1 {
			t.Fatalf("Redis gives the lag (%+v, %v): the test does not test the NULL lag", groups, err)
		}
		for i := 0; lag() != want; i++ {
			if i == 10 {
				t.Fatalf("%s: stream_consumer_lag %v, want %v", what, lag(), want)
			}
			nextReading()
		}
	}
	settles(1001, "nothing read, 1001 entries after the XDEL")
	// One entry delivered (pending, before the deleted one), then
	// acknowledged: 1000 undelivered are counted after the last delivered id.
	if err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	settles(1001, "one delivered and pending, 1000 undelivered")
	raw.XAck(ctx, stream, group, first[0])
	settles(1000, "1000 undelivered")

	// A stream first read in that state has a series at once.
	fresh := redistest.Prefix(t) + "fresh"
	raw.XGroupCreateMkStream(ctx, fresh, group, "0")
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = raw.XAdd(ctx, &redis.XAddArgs{Stream: fresh, Values: []any{FieldData, "m"}}).Val()
	}
	raw.XDel(ctx, fresh, ids[1])
	if _, err := s.Publish(ctx, fresh, []byte("m")); err != nil { // makes the stream known
		t.Fatal(err)
	}
	for i := 0; !lagSeries(t, reg, fresh, group); i++ {
		if i == 10 {
			t.Fatal("no stream_consumer_lag for a stream whose lag Redis answers NULL")
		}
		nextReading()
	}
	if n := obstest.Value(t, reg, "stream_consumer_lag", "stream", fresh, "group", group); n != 3 {
		t.Errorf("lag of the fresh stream %v, want 3", n)
	}
}
