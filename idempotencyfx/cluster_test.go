package idempotencyfx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// On a Redis Cluster every script touches one key, so keys spread over all
// masters; waiters on one node are woken by completions published on
// another (PUBLISH is broadcast across the cluster bus).
func TestCluster_ScriptsAndWaitersAcrossMasters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	client, err := storefx.New("default", storefx.Config{Addrs: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	svc, err := New(client, Config{DefaultTTL: time.Minute, KeyPrefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := svc.Install(Idempotent()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		time.Sleep(100 * time.Millisecond)
		_, _ = w.Write([]byte("ok " + r.Header.Get("Idempotency-Key")))
	})))
	post := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	var wg sync.WaitGroup
	for k := 0; k < 12; k++ { // 12 keys over the 3 masters, 5 duplicates each
		for d := 0; d < 5; d++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "key-" + strconv.Itoa(k)
				if w := post(key); w.Code != 200 || w.Body.String() != "ok "+key {
					t.Errorf("%s: %d %q", key, w.Code, w.Body.String())
				}
			}()
		}
	}
	wg.Wait()
	if n := runs.Load(); n != 12 {
		t.Fatalf("handler ran %d times for 12 keys", n)
	}
}
