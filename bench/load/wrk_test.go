package load

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wrk sends what Run sends: the body, the content type, and per path no
// key, one key (recorded before the run), or a new key per request; its
// request count is the server's.
func TestRunWrk_SendsTheKeysOfEachPath(t *testing.T) {
	if !WrkAvailable() {
		t.Skip("wrk is not on PATH")
	}
	for _, keys := range []Keys{None, One, Unique} {
		t.Run(string(keys), func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]int{}
			served := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				seen[r.Header.Get("Idempotency-Key")]++
				served++
				w.WriteHeader(http.StatusCreated)
			}))
			defer srv.Close()
			res, err := RunWrk(context.Background(), Options{URL: srv.URL, Connections: 2, Duration: time.Second, Keys: keys, Body: `{}`, KeyPrefix: "p-"})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if res.Requests == 0 || res.Requests > served || res.Statuses[200] != res.Requests || res.Errors != 0 {
				t.Fatalf("wrk counted %d requests (%v, %d errors), the server served %d", res.Requests, res.Statuses, res.Errors, served)
			}
			switch keys {
			case None:
				if len(seen) != 1 || seen[""] != served {
					t.Fatalf("keys sent without a key path: %d distinct", len(seen))
				}
			case One:
				if len(seen) != 1 || seen["p-one"] != served {
					t.Fatalf("replay path: %d distinct keys", len(seen))
				}
			case Unique:
				if len(seen) != served {
					t.Fatalf("new-key path: %d distinct keys for %d requests", len(seen), served)
				}
			}
		})
	}
}
