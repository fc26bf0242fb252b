package idempotencyfx

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// adversarialShapes are 1 MiB JSON bodies (MaxBodyBytes' default) of the
// shapes that stress a canonicaliser: nesting, width, long strings, many
// scalars, and keys that collide under case folding or as integers.
func adversarialShapes() []struct {
	name string
	body []byte
} {
	const size = 1 << 20
	var deepObjects bytes.Buffer
	const depth = MaxJSONDepth
	per := (size/depth - 8) / 7
	for range depth {
		deepObjects.WriteByte('{')
		for k := range per {
			deepObjects.WriteString(`"` + strconv.Itoa(k) + `":1,`)
		}
		deepObjects.WriteString(`"n":`)
	}
	deepObjects.WriteString("0" + strings.Repeat("}", depth))

	wide := func(keyOf func(k int) string) []byte {
		var b bytes.Buffer
		b.WriteByte('{')
		for k := 0; b.Len() < size-32; k++ {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + keyOf(k) + `":` + strconv.Itoa(k))
		}
		b.WriteByte('}')
		return b.Bytes()
	}

	var longStrings bytes.Buffer
	longStrings.WriteByte('[')
	chunk := strings.Repeat(`plain text \"quoted\" \u00e9\ud83d\ude00 \n`, 1<<10)
	for longStrings.Len() < size-len(chunk)-8 {
		if longStrings.Len() > 1 {
			longStrings.WriteByte(',')
		}
		longStrings.WriteString(`"` + chunk + `"`)
	}
	longStrings.WriteByte(']')

	var numbers bytes.Buffer
	numbers.WriteByte('[')
	for k := 0; numbers.Len() < size-32; k++ {
		if k > 0 {
			numbers.WriteByte(',')
		}
		numbers.WriteString(strconv.Itoa(k%1000-500) + ".25e-3")
	}
	numbers.WriteByte(']')

	return []struct {
		name string
		body []byte
	}{
		{"deep-arrays", deepArrays(MaxJSONDepth, size)},
		{"deep-objects", deepObjects.Bytes()},
		{"wide-object", wide(func(k int) string { return "key" + strconv.Itoa(k) })},
		{"wide-object-case-colliding", wide(func(k int) string {
			if k%2 == 1 {
				return "KEY" + strconv.Itoa(k-1)
			}
			return "key" + strconv.Itoa(k)
		})},
		// Pairs of keys of one integer ("6", "06"), and each of them long
		// with leading zeros every third pair.
		{"wide-object-integer-colliding", wide(func(k int) string {
			pad := ""
			if k%6 >= 4 {
				pad = strings.Repeat("0", 64)
			}
			if k%2 == 1 {
				return "0" + pad + strconv.Itoa(k-1)
			}
			return pad + strconv.Itoa(k)
		})},
		{"long-strings", longStrings.Bytes()},
		{"many-numbers", numbers.Bytes()},
	}
}

// BenchmarkCanonicalJSONAdversarial fingerprints each adversarial shape
// (canonical JSON into SHA-256, as DefaultFingerprint does on every request
// with a key) beside encoding/json on the same body in the same run:
// json.Unmarshal into any (what a handler does) and json.Valid (the least
// any parser does). The ratio to json.Unmarshal is the bound (at most 10×).
func BenchmarkCanonicalJSONAdversarial(b *testing.B) {
	for _, s := range adversarialShapes() {
		if !json.Valid(s.body) {
			b.Fatalf("%s is not JSON", s.name)
		}
		req, _ := http.NewRequest(http.MethodPost, "/payments", nil)
		req.Header.Set("Content-Type", "application/json")
		b.Run(s.name+"/fingerprint", func(b *testing.B) {
			b.SetBytes(int64(len(s.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DefaultFingerprint(req, s.body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(s.name+"/json.Unmarshal", func(b *testing.B) {
			b.SetBytes(int64(len(s.body)))
			b.ReportAllocs()
			for b.Loop() {
				var v any
				if err := json.Unmarshal(s.body, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(s.name+"/json.Valid", func(b *testing.B) {
			b.SetBytes(int64(len(s.body)))
			for b.Loop() {
				if !json.Valid(s.body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// The bound of BenchmarkCanonicalJSONAdversarial, checked in every test run
// without the race detector (which slows the two sides unevenly): for each
// shape the fingerprint costs at most 10× json.Unmarshal on the same body.
// Each side is timed three times, alternating, and the fastest run counts,
// so that load from other processes weighs on both alike.
func TestCanonicalJSON_AdversarialShapesWithin10xOfEncodingJSON(t *testing.T) {
	if raceDetector || testing.Short() {
		t.Skip("timing bound: not with -race or -short")
	}
	req, _ := http.NewRequest(http.MethodPost, "/payments", nil)
	req.Header.Set("Content-Type", "application/json")
	for _, s := range adversarialShapes() {
		fingerprint, unmarshal := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
		for range 3 {
			began := time.Now()
			if _, err := DefaultFingerprint(req, s.body); err != nil {
				t.Fatal(err)
			}
			fingerprint = min(fingerprint, time.Since(began))
			began = time.Now()
			var v any
			if err := json.Unmarshal(s.body, &v); err != nil {
				t.Fatal(err)
			}
			unmarshal = min(unmarshal, time.Since(began))
		}
		ratio := float64(fingerprint) / float64(unmarshal)
		t.Logf("%-30s fingerprint %8v  json.Unmarshal %8v  ratio %.2f", s.name, fingerprint, unmarshal, ratio)
		if ratio > 10 {
			t.Errorf("%s: fingerprint %v is %.1f× json.Unmarshal's %v (bound 10×)", s.name, fingerprint, ratio, unmarshal)
		}
	}
}

// BenchmarkDefaultFingerprint_Typical fingerprints what keyed requests
// usually carry: a small payment and an order of a few hundred bytes, as
// every keyed request pays it.
func BenchmarkDefaultFingerprint_Typical(b *testing.B) {
	for _, body := range []struct{ name, json string }{
		{"payment", `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`},
		{"order", `{"customer_id":"cus_9s6XKzkNRiz8i3","currency":"usd","items":[{"sku":"sku_1001","quantity":2,"unit_amount":1999,"description":"Blue mug, 350 ml"},{"sku":"sku_2002","quantity":1,"unit_amount":4500,"description":"Tea sampler"}],"shipping":{"name":"Ada Lovelace","address":{"line1":"12 St James's Square","city":"London","postal_code":"SW1Y 4JH","country":"GB"},"method":"standard"},"metadata":{"channel":"web","campaign":"autumn-2026"},"note":null,"gift":false}`},
	} {
		req, _ := http.NewRequest(http.MethodPost, "/orders", nil)
		req.Header.Set("Content-Type", "application/json")
		data := []byte(body.json)
		b.Run(body.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DefaultFingerprint(req, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
