package idempotencyfx

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// deepArrays is the body: nested arrays depth levels deep, each
// level holding a run of numbers, about size bytes in all.
func deepArrays(depth, size int) []byte {
	per := max(size/depth-3, 0) / 2
	var b bytes.Buffer
	for range depth {
		b.WriteByte('[')
		b.WriteString(strings.Repeat("1,", per))
	}
	b.WriteByte('1')
	b.WriteString(strings.Repeat("]", depth))
	return b.Bytes()
}

// Issue 14, item 3: canonicalisation re-scanned each subtree once per
// ancestor, O(size × depth): a 1 MiB body of arrays 9,999 deep took about
// two minutes of CPU. It is linear now. The bound is generous (the work is
// ~20 ms, ~0.3 s under -race) and far below the quadratic time.
func TestFingerprint_DeepNesting_LinearTime(t *testing.T) {
	t.Parallel()
	body := deepArrays(9999, 1<<20)
	if !json.Valid(body) {
		t.Fatal("the test body is not JSON")
	}
	done := make(chan string, 1)
	began := time.Now()
	go func() { done <- fp(t, DefaultFingerprint, "POST", "/p", "application/json", string(body)) }()
	select {
	case <-done:
		t.Logf("1 MiB, 9,999 deep: %v", time.Since(began))
	case <-time.After(10 * time.Second):
		t.Fatalf("fingerprint of a 1 MiB body 9,999 deep still running after 10s")
	}
}

// Bodies nested deeper than MaxJSONDepth get 400 idempotency_body_too_deep,
// before any Redis command, and the handler does not run.
func TestDefaultFingerprint_TooDeep_400BeforeAnyStoreCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	before := e.cmds.n.Load()
	deep := strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1)
	wantStatus(t, e.post("/payments", "deep", deep), 400, CodeBodyTooDeep)
	if e.cmds.n.Load() != before || e.calls.Load() != 0 {
		t.Fatal("store called or handler ran")
	}
	// At the limit the body is fingerprinted as usual.
	atLimit := strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth)
	wantStatus(t, e.post("/payments", "at-limit", atLimit), 201, "")
}

// Issue 14, item 6: object keys that differ only in case decode into the
// same struct field (encoding/json matches case-insensitively, last one
// wins), so their order matters and must not be canonicalised away.
func TestFingerprint_KeysDifferingOnlyInCase_Differ(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{`{"amount":1,"Amount":100}`, `{"Amount":100,"amount":1}`},
		{`{"a":{"k":1,"K":2}}`, `{"a":{"K":2,"k":1}}`},
		{`{"k":1,"\u212a":2}`, `{"\u212a":2,"k":1}`}, // KELVIN SIGN folds to k
		{`[{"Id":1,"ID":2,"x":0}]`, `[{"x":0,"ID":2,"Id":1}]`},
		// Every duplicate counts: with objects for values the earlier one
		// is merged into a struct, not overwritten.
		{`{"a":1,"A":5,"a":2}`, `{"A":5,"a":2}`},
	} {
		a := fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[0])
		b := fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[1])
		if a == b {
			t.Errorf("%s and %s have the same fingerprint but decode differently", pair[0], pair[1])
		}
	}
	// Order still does not matter for keys that do not collide, in the same
	// object as colliding ones too.
	for _, pair := range [][2]string{
		{`{"amount":1,"currency":"EUR"}`, `{"currency":"EUR","amount":1}`},
		{`{"b":0,"amount":1,"Amount":2,"c":3}`, `{"c":3,"amount":1,"b":0,"Amount":2}`},
	} {
		a := fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[0])
		b := fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[1])
		if a != b {
			t.Errorf("%s and %s decode alike but have different fingerprints", pair[0], pair[1])
		}
	}
}

// Through the middleware: the second body gets 422, not the first one's
// charge replayed.
func TestCaseCollidingKeys_SecondBodyGets422(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	wantStatus(t, e.post("/payments", "case", `{"amount":1,"Amount":100}`), 201, "")
	wantStatus(t, e.post("/payments", "case", `{"Amount":100,"amount":1}`), 422, CodeKeyReused)
}

// Object keys that are one integer written differently ("1", "01", "+1",
// "001"; "-0" and "0") are one key of a map with an integer key type:
// encoding/json parses them with strconv.ParseInt or ParseUint, and the last
// one wins. So their order matters, as for keys that differ only in case.
func TestFingerprint_KeysOfOneInteger_OrderCounts(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{`{"1":"4242","01":"5555"}`, `{"01":"5555","1":"4242"}`},
		{`{"1":"a","+1":"b"}`, `{"+1":"b","1":"a"}`},
		{`{"001":"a","01":"b"}`, `{"01":"b","001":"a"}`},
		{`{"-0":"a","0":"b"}`, `{"0":"b","-0":"a"}`},
		{`{"-0":"a","+0":"b"}`, `{"+0":"b","-0":"a"}`},
		{`{"-1":"a","-01":"b"}`, `{"-01":"b","-1":"a"}`},
		{`{"18446744073709551615":"a","018446744073709551615":"b"}`, `{"018446744073709551615":"b","18446744073709551615":"a"}`}, // uint64 only
		{`{"x":{"7":1,"07":2}}`, `{"x":{"07":2,"7":1}}`},
		{`{"\u0031":"a","01":"b"}`, `{"01":"b","\u0031":"a"}`}, // escapes decoded first
		// Case collisions in the same object still count.
		{`{"1":1,"01":2,"k":3,"K":4}`, `{"1":1,"01":2,"K":4,"k":3}`},
	} {
		a := fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[0])
		b := fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[1])
		if a == b {
			t.Errorf("%s and %s have the same fingerprint but decode differently", pair[0], pair[1])
		}
	}
	// Order still does not matter for keys of different integers (or not
	// integers), in the same object as keys of one integer too.
	for _, pair := range [][2]string{
		{`{"1":"a","2":"b"}`, `{"2":"b","1":"a"}`},
		{`{"01":"a","1":"b","a":0,"2":3}`, `{"a":0,"01":"a","2":3,"1":"b"}`},
		{`{"-1":"a","1":"b","01":"c"}`, `{"1":"b","-1":"a","01":"c"}`},
		{`{"1":0,"01":1,"k":3,"K":4}`, `{"k":3,"1":0,"K":4,"01":1}`},
	} {
		a := fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[0])
		b := fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[1])
		if a != b {
			t.Errorf("%s and %s decode alike but have different fingerprints", pair[0], pair[1])
		}
	}
}

// Through the middleware: a handler that decodes into map[int]string charges
// card 4242 for the second body; it gets 422, not the first one's "charged
// card 5555" replayed (found by an adversary).
func TestIntegerMapKeys_SecondBodyGets422(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		var cards map[int]string
		if err := json.NewDecoder(r.Body).Decode(&cards); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e.calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged card "+cards[1])
	})
	wantStatus(t, e.post("/payments", "int-keys", `{"1":"4242","01":"5555"}`), 201, "")
	wantStatus(t, e.post("/payments", "int-keys", `{"01":"5555","1":"4242"}`), 422, CodeKeyReused)
	if n := e.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// Soundness of the canonical form: two objects with equal canonical forms
// decode alike, into a map and into a struct (case-insensitive field
// matching). Every ordering of small objects over colliding keys is tried.
func TestCanonicalJSON_EqualFormsDecodeAlike(t *testing.T) {
	t.Parallel()
	type target struct{ A, B, K int }
	keys := []string{"a", "A", "b", "k", "K", "\u212a"}
	rng := rand.New(rand.NewPCG(14, 6))
	byForm := map[string][]string{}
	for range 80000 {
		n := 1 + rng.IntN(4)
		var b strings.Builder
		b.WriteByte('{')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + keys[rng.IntN(len(keys))] + `":` + string(rune('0'+rng.IntN(3))))
		}
		b.WriteByte('}')
		form, ok := CanonicalJSON([]byte(b.String()))
		if !ok {
			t.Fatalf("%s not JSON", b.String())
		}
		byForm[string(form)] = append(byForm[string(form)], b.String())
	}
	for _, docs := range byForm {
		var m0 map[string]int
		var s0 target
		_ = json.Unmarshal([]byte(docs[0]), &m0)
		_ = json.Unmarshal([]byte(docs[0]), &s0)
		for _, d := range docs[1:] {
			var m map[string]int
			var s target
			_ = json.Unmarshal([]byte(d), &m)
			_ = json.Unmarshal([]byte(d), &s)
			if !reflect.DeepEqual(m, m0) || s != s0 {
				t.Fatalf("%s and %s share a canonical form but decode as %v %+v and %v %+v", docs[0], d, m0, s0, m, s)
			}
		}
	}
}

// The canonical form of ordinary bodies is unchanged by the linear rewrite,
// so fingerprints recorded before it still match their retries. The
// expected values were computed with the previous implementation.
func TestCanonicalJSON_FingerprintsOfOrdinaryBodiesUnchanged(t *testing.T) {
	t.Parallel()
	for body, want := range recordedFingerprints {
		if got := fp(t, DefaultFingerprint, "POST", "/payments?x=1", "application/json", body); got != want {
			t.Errorf("fingerprint of %s = %s, was %s", body, got, want)
		}
	}
	ignoring := IgnoreJSONFields("meta.request_id", "items[].ts", "sent_at")
	for body, want := range recordedIgnoringFingerprints {
		if got := fp(t, ignoring, "POST", "/payments", "application/json", body); got != want {
			t.Errorf("fingerprint ignoring fields of %s = %s, was %s", body, got, want)
		}
	}
}

// Fingerprints computed by the canonicaliser before its linear rewrite.
var recordedFingerprints = map[string]string{
	"{\"amount\":1250,\"currency\":\"EUR\",\"card\":\"4242424242424242\"}":                                     "f6b21456e3418e200df69850a2bc2efe0675adee1653d2df73e8beeb0492ebf0",
	"{ \"currency\" : \"EUR\", \"amount\" : 1250 , \"card\":\"4242424242424242\" }":                            "f6b21456e3418e200df69850a2bc2efe0675adee1653d2df73e8beeb0492ebf0",
	"{\"a\":{\"b\":{\"c\":[1,2,{\"d\":\"e\"}]}},\"list\":[true,false,null,-0.5E+3,\"\\u00e9\\ud83d\\ude00\"]}": "e3619e772bb38c96d25425b6aa9df58c4ae2693942093ff462cd7c279c49b56b",
	"[]":           "ddbeaa844567b0b38859a6a731a53ee05dfa2606e4d49c45f3db7a667ce21424",
	"{}":           "286c375f6df3e4a13c724996cb1a5b5cf641ef9e265c6ff0dbeabc27183a50b8",
	"\"str\"":      "7722a4d1351e8e045785e62aabd4fac98f3dc269da9afb8581fdd9a2ce693277",
	"12.50":        "753d0593a27662afb4219d979066a52753e627cc0823f668922d02e808fd6448",
	"null":         "1181f7d6a07d46c2fb426ac97f5a8a9b5776a94a9df48e91693b8727367fcb6a",
	"[[],[[]],{}]": "357a79a9d14acb3c5715f836248de802bfbd871e9b9b2c886845e1b66d0a4b39",
	// Changed when duplicate keys began to count (each, in document order):
	// was d0d121ff3f0e4ff09d6ac820b32b9a7f8435363fc480959e0ed010530915a964.
	"{\"a\":1,\"a\":2,\"b\":[{\"x\":\"\\n\\t\\\"\\\\\"}]}":                                                                                                                 "631861afe0ef15e321f08a4010ca6d0e0eded9e24e6a2980538005196f0d3e3f",
	"{\"Name\":\"Zoë\",\"ünï\":\"\\u00fc\",\"AMOUNT\":1,\"zz\":{\"Ab\":1,\"aC\":2}}":                                                                                       "ec7a6ef90eb36f7a971870203d2a9a37d238ba7921f8e33cd6c18507b2c46d17",
	"{\"items\":[{\"sku\":\"A1\",\"qty\":2,\"ts\":\"2026-01-01\"},{\"sku\":\"B2\",\"qty\":1,\"ts\":\"x\"}],\"meta\":{\"request_id\":\"r-1\",\"k\":1},\"sent_at\":\"now\"}": "f59e1625b92d0a3fcc9a870c19ef53d0e91d4b1f0f2efb840c2fb5c5bafd02fa",
	"{\"bad\":\"\xff\xfe\"}": "44b8191a2a8d95b3c5b38b83bec811e09736bd7692e4eab8afc8e2508791aeb3",
	// Integer keys written oddly but never two of one value (and case
	// collisions beside them): computed before integer keys of one value
	// began to keep their order, and unchanged by it.
	"{\"01\":\"a\",\"+2\":\"b\",\"-0\":\"c\",\"x\":1,\"10\":2}": "9e6d6aa9790c63b3ce063062b558401a95678fa40734fef75e65b71cf65d22c0",
	"{\"Amount\":1,\"amount\":2,\"007\":3,\"7x\":4}":            "b135a70624f563f2521b66773715d6fcadefa8df805cb7cea320c3312ad049f8",
	"{\"1\":\"4242\",\"2\":\"5555\",\"-3\":1,\"a\":{\"00\":1}}": "c87d6f4373cbfe55298ea86f475804fb0d351d96c17aeba8ead303d4ae06d5f9",
}

var recordedIgnoringFingerprints = map[string]string{
	"{\"amount\":1250,\"currency\":\"EUR\",\"card\":\"4242424242424242\"}":                                     "27b485b533ece89c660ae52666fc45a56da98615388ca5a338ec97bcb69a21da",
	"{ \"currency\" : \"EUR\", \"amount\" : 1250 , \"card\":\"4242424242424242\" }":                            "27b485b533ece89c660ae52666fc45a56da98615388ca5a338ec97bcb69a21da",
	"{\"a\":{\"b\":{\"c\":[1,2,{\"d\":\"e\"}]}},\"list\":[true,false,null,-0.5E+3,\"\\u00e9\\ud83d\\ude00\"]}": "a87ba5130ff48703e673a49731b138bf7a8881687b79c9db43ef9447bc860bbc",
	"[]":           "7db07fd1bcd5f1d7e8230c9b6657f4ae7fc14ede890a6ea1573500636ef2356d",
	"{}":           "14cdbe1aa1808dcc60922a600d7c275faaf79eb8c88795d30851eea1a39d02a6",
	"\"str\"":      "bcf161b4bd91e97f5173ff3424703baf3f67b833a9f3c1e7899dd9b775d9045c",
	"12.50":        "5e33b2014c827ee0718b1cec49c68e38c7a6fc78c308bfa294dc42385199e136",
	"null":         "1cfd9b422a6467a4fa38527303753699aa2a2d40f9c86c14dd2ed4990a4fb6f1",
	"[[],[[]],{}]": "a39865697954a622f1d3bf4ada1a700b5552145ed94bde567c14f9cfabda11f5",
	// Changed when duplicate keys began to count: was fd0bd1ea0e98796f1ca3cf5ca350a1bfdf650a7a7a026c30ea12b70bf3951548.
	"{\"a\":1,\"a\":2,\"b\":[{\"x\":\"\\n\\t\\\"\\\\\"}]}":                                                                                                                 "cb07f3b3e738b172ab4c5e0a31a863857b4db83b0bd138ad1498392b446bc02d",
	"{\"Name\":\"Zoë\",\"ünï\":\"\\u00fc\",\"AMOUNT\":1,\"zz\":{\"Ab\":1,\"aC\":2}}":                                                                                       "c7929c4d3016afa83cc2c37772294f8d4fc962d2bf9628019aef49d368a5603d",
	"{\"items\":[{\"sku\":\"A1\",\"qty\":2,\"ts\":\"2026-01-01\"},{\"sku\":\"B2\",\"qty\":1,\"ts\":\"x\"}],\"meta\":{\"request_id\":\"r-1\",\"k\":1},\"sent_at\":\"now\"}": "cd2a511dddb678468168073ed5fa3e5fd0deed58ae3e92af94a26aea6380b4f0",
	"{\"bad\":\"\xff\xfe\"}":                                    "d832a175a31e781df7489aed0835b60724abe802cebc2247b65e6fb628b4f80f",
	"{\"01\":\"a\",\"+2\":\"b\",\"-0\":\"c\",\"x\":1,\"10\":2}": "6c6fd2e97b3e2ec91e67790897c86ff92618ef452c66474b1b4b173967ffbbc4",
	"{\"Amount\":1,\"amount\":2,\"007\":3,\"7x\":4}":            "eed32f55ebbe3c88d67f4bf6c7af83c4e5b90201d7344198abde9b17b5dc3f23",
	"{\"1\":\"4242\",\"2\":\"5555\",\"-3\":1,\"a\":{\"00\":1}}": "9788b0ceec25031a328921799cf942f2f50c995879c0d1c82e5562f915d0b033",
}

// Duplicate keys: encoding/json does not simply keep the last value. A null
// leaves a string or number field as it was, and repeated objects are
// merged into a struct or typed map. So every duplicate counts, in document
// order, and two bodies share a canonical form only if they decode alike
// into structs (nested, pointers) and maps. Values are drawn from ints,
// null, strings and small objects, keys from a set with case collisions.
// (Found by an adversary: {"card":"4242","card":null} and
// {"card":"5555","card":null} shared a fingerprint, and the second payment
// got the first one's charge replayed.) Keys also include integers written
// in several ways, decoded into maps with integer key types, signed and
// unsigned, small and 64-bit: "1", "01" and "+1" are one key there, the
// last one wins (found by an adversary: {"1":"4242","01":"5555"} and
// {"01":"5555","1":"4242"} shared a fingerprint).
func TestCanonicalJSON_DuplicateKeysDecodeAlike(t *testing.T) {
	t.Parallel()
	type inner struct{ X, Y int }
	type target struct {
		A    int
		Card string
		P    *int
		M    inner
		MP   *inner
	}
	keys := []string{"a", "A", "card", "Card", "p", "m", "M", "mp",
		"1", "01", "+1", "0", "-0", "-01", "255", "0256", "-1",
		"18446744073709551615", "018446744073709551615", "-9223372036854775808", "-09223372036854775808"}
	values := []string{"1", "2", "null", `"s1"`, `"s2"`, `{"x":1}`, `{"y":2}`, `{"x":3,"y":4}`}
	rng := rand.New(rand.NewPCG(19, 1))
	byForm := map[string][]string{}
	for range 40000 {
		n := 1 + rng.IntN(5)
		var b strings.Builder
		b.WriteByte('{')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + keys[rng.IntN(len(keys))] + `":` + values[rng.IntN(len(values))])
		}
		b.WriteByte('}')
		form, ok := CanonicalJSON([]byte(b.String()))
		if !ok {
			t.Fatalf("%s not JSON", b.String())
		}
		byForm[string(form)] = append(byForm[string(form)], b.String())
	}
	decode := func(doc string) string {
		var s target
		var m map[string]any
		var mm map[string]map[string]int
		var mi map[int]string
		var mu8 map[uint8]string
		var mi64 map[int64]any
		var mu64 map[uint64]string
		outs := []any{&s, &m, &mm, &mi, &mu8, &mi64, &mu64}
		var failed []bool
		for _, v := range outs {
			failed = append(failed, json.Unmarshal([]byte(doc), v) != nil)
		}
		out, _ := json.Marshal(append(outs, failed))
		return string(out)
	}
	shared := 0
	for _, docs := range byForm {
		want := decode(docs[0])
		for _, d := range docs[1:] {
			shared++
			if got := decode(d); got != want {
				t.Fatalf("%s and %s share a canonical form but decode as\n%s\n%s", docs[0], d, want, got)
			}
		}
	}
	if shared < 1000 {
		t.Fatalf("only %d documents shared a canonical form: the test proves little", shared)
	}
}

func TestFingerprint_DuplicateKeysEachCount(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{`{"amount":100,"card":"4242","card":null}`, `{"amount":100,"card":"5555","card":null}`},
		{`{"amount":100,"meta":{"a":1},"meta":{"b":2}}`, `{"amount":100,"meta":{"b":2}}`},
		{`{"a":1,"a":2}`, `{"a":2,"a":1}`},
	} {
		if fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[0]) ==
			fp(t, DefaultFingerprint, "POST", "/p", "application/json", pair[1]) {
			t.Errorf("%s and %s share a fingerprint", pair[0], pair[1])
		}
	}
	// Key order and whitespace still do not matter, duplicates included.
	if fp(t, DefaultFingerprint, "POST", "/p", "application/json", `{"a":1,"b":2,"a":3}`) !=
		fp(t, DefaultFingerprint, "POST", "/p", "application/json", `{ "b":2, "a":1, "a":3 }`) {
		t.Error("reordering distinct keys around duplicates changed the fingerprint")
	}
}

// Through the middleware: the second payment charges another card, so it
// gets 422, not the first one's charge replayed.
func TestDuplicateKeys_SecondPaymentGets422(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, nil)
	wantStatus(t, e.post("/payments", "dup", `{"amount":100,"card":"4242","card":null}`), 201, "")
	wantStatus(t, e.post("/payments", "dup", `{"amount":100,"card":"5555","card":null}`), 422, CodeKeyReused)
}
