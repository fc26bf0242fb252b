package idempotencyfx

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// Issue 14, item 5: MaxResponseBytes above what a replay can read back is
// refused at start, naming the field.
func TestConfig_MaxResponseBytesAboveReadableLimit_Refused(t *testing.T) {
	t.Parallel()
	err := Config{MaxResponseBytes: 100 << 20}.Validate()
	if err == nil || !strings.Contains(err.Error(), "MaxResponseBytes") {
		t.Fatalf("Validate(MaxResponseBytes: 100 MiB) = %v, want an error naming MaxResponseBytes", err)
	}
	if err := (Config{MaxResponseBytes: MaxResponseBytesLimit}).Validate(); err != nil {
		t.Fatalf("the limit itself is refused: %v", err)
	}
}

// A record that inflates beyond the readable limit is refused, never
// replayed shorter than it was; one at the limit is read back whole.
func TestDecodeResponse_RecordBeyondLimit_RefusedNotTruncated(t *testing.T) {
	t.Parallel()
	raw := rawRecord(65<<20 + 4)
	resp, err := decodeResponse(storedDeflate(raw))
	if err == nil {
		t.Fatalf("a 65 MiB record was decoded with a %d-byte body, want an error", len(resp.Body))
	}
	raw = rawRecord(maxRecordBytes)
	resp, err = decodeResponse(storedDeflate(raw))
	if err != nil || !bytes.Equal(resp.Body, raw[4:]) {
		t.Fatalf("a record at the limit: err=%v, body %d bytes, want %d", err, len(resp.Body), len(raw)-4)
	}
}

// A response whose body and headers exceed what can be read back is not
// recorded (the middleware then records it as not replayable).
func TestEncodeResponse_BeyondLimit_NotRecorded(t *testing.T) {
	t.Parallel()
	body := make([]byte, MaxResponseBytesLimit)
	h := http.Header{"X-Huge": {strings.Repeat("h", 1<<20)}}
	if _, ok := encodeResponse(200, h, nil, body); ok {
		t.Fatal("a record beyond the readable limit was accepted")
	}
	if _, ok := encodeResponse(200, http.Header{"X-Small": {"1"}}, nil, body[:1<<20]); !ok {
		t.Fatal("a 1 MiB response was refused")
	}
}

// rawRecord is an encoded 200 response without headers whose encoding is
// n bytes long (4 bytes of format, status and header count, then the body).
func rawRecord(n int) []byte {
	raw := binary.AppendUvarint([]byte{responseFormat}, 200)
	raw = binary.AppendUvarint(raw, 0)
	alphabet := []byte("abcdefghijklmnopqrstuvwxyz")
	return append(raw, bytes.Repeat(alphabet, n/len(alphabet)+1)[:n-len(raw)]...)
}

// storedDeflate wraps b in DEFLATE stored blocks, prefixed by the
// compressed-record format byte: a large record at memcpy speed, which the
// race detector does not slow down as it does the compressor.
func storedDeflate(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/65535*5+16)
	out = append(out, responseDeflated)
	for {
		n := min(len(b), 65535)
		final := byte(0)
		if n == len(b) {
			final = 1
		}
		out = append(out, final, byte(n), byte(n>>8), ^byte(n), ^byte(n>>8))
		out = append(out, b[:n]...)
		b = b[n:]
		if final == 1 {
			return out
		}
	}
}

// Service.Do applies MaxResponseBytes as the middleware does: a larger
// result is not recorded, and later calls are refused as not replayable.
func TestDo_ResultAboveMaxResponseBytes_NotReplayable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxResponseBytes: 16}, nil)
	ctx := context.Background()
	big := []byte(strings.Repeat("x", 17))
	out, _, err := e.svc.Do(ctx, "big", "fp", func(context.Context) ([]byte, error) { return big, nil })
	if err != nil || !bytes.Equal(out, big) {
		t.Fatalf("first call: %q %v", out, err)
	}
	_, _, err = e.svc.Do(ctx, "big", "fp", func(context.Context) ([]byte, error) {
		t.Error("ran again")
		return nil, nil
	})
	var notReplayable *IdempotencyNotReplayableError
	if !errors.As(err, &notReplayable) {
		t.Fatalf("second call: %v, want IdempotencyNotReplayableError", err)
	}
}

// mustEncode is encodeResponse for responses known to be recordable.
func mustEncode(status int, h http.Header, body []byte) []byte {
	b, ok := encodeResponse(status, h, nil, body)
	if !ok {
		panic("not recordable")
	}
	return b
}
