// Package protocol is what the benchmark servers share: the trivial
// payments handler and the limit, the idempotency protocol's round trips
// and nothing else.
package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/internal/idemscript"
)

// Body is the payment every server answers with.
var Body = []byte(`{"id":"pay_3f9a1c0e5b7d2468ace13579","amount":1250,"currency":"EUR","status":"succeeded"}`)

// Payment is the handler every server serves. The processor-failure test
// card answers 500, so that soak runs exercise failed records too.
func Payment(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if bytes.Contains(body, []byte("4000000000000119")) {
		http.Error(w, "processor failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/pay_3f9a1c0e5b7d2468ace13579")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(Body)
}

// Spin is how many times more the limit hashes the body per keyed request,
// to give it a server's CPU per request without changing what it sends Redis.
var Spin int

// Limit does the protocol's round trips and nothing else: the fingerprint
// is a SHA-256 of the body, the recorded response is the raw body. outcome,
// when not nil, is told what became of each request (the SDK floor puts it
// on its SERVER span, as idempotencyfx does).
func Limit(rdb redis.Scripter, prefix string, outcome func(*http.Request, idempotencyfx.Outcome)) func(http.Handler) http.Handler {
	var owner atomic.Int64
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get("Idempotency-Key")
			if key == "" {
				if outcome != nil {
					outcome(r, idempotencyfx.OutcomeBypass)
				}
				next.ServeHTTP(w, r)
				return
			}
			body, _ := io.ReadAll(r.Body)
			sum := sha256.Sum256(body)
			fp := hex.EncodeToString(sum[:])
			for range Spin {
				sum = sha256.Sum256(append(body[:len(body):len(body)], sum[:]...))
			}
			me := strconv.FormatInt(owner.Add(1), 36)
			v, err := idemscript.Claim.Run(r.Context(), rdb, []string{prefix + key}, fp, me, 30000, "1").Slice()
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			kind, _ := v[0].(string)
			switch kind {
			case "c":
				if outcome != nil {
					outcome(r, idempotencyfx.OutcomeReplay)
				}
				resp, _ := v[1].(string)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, resp)
			case "n", "t":
				if outcome != nil {
					outcome(r, idempotencyfx.OutcomeNew)
				}
				err := idemscript.Complete.Run(r.Context(), rdb, []string{prefix + key}, me, "c", Body, 3600000).Err()
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				next.ServeHTTP(w, r)
			default:
				http.Error(w, fmt.Sprint(v[0]), http.StatusConflict)
			}
		})
	}
}
