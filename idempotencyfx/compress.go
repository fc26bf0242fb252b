package idempotencyfx

import (
	"bytes"
	"compress/flate"
	"io"
	"sync"
)

// Recorded responses above compressAbove bytes are stored DEFLATE-compressed
// when that saves at least a tenth: Redis memory is the cost that grows with
// DefaultTTL, and a JSON response shrinks to a third. Writers and readers
// are pooled; their allocations dwarf a 1 KiB body otherwise.

var (
	writers = sync.Pool{New: func() any {
		w, _ := flate.NewWriter(nil, flate.BestSpeed)
		return w
	}}
	readers = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}
)

// deflate returns responseDeflated followed by the compressed encoding
// (which itself starts with responseFormat).
func deflate(payload []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(payload)/2 + 16)
	buf.WriteByte(responseDeflated)
	w := writers.Get().(*flate.Writer)
	w.Reset(&buf)
	_, _ = w.Write(payload)
	_ = w.Close()
	writers.Put(w)
	return buf.Bytes()
}

// maxInflated bounds what a corrupt or hostile record can expand to.
const maxInflated = 64 << 20

func inflate(z []byte) ([]byte, error) {
	r := readers.Get().(io.ReadCloser)
	defer readers.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(z), nil); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(len(z) * 3)
	if _, err := out.ReadFrom(io.LimitReader(r, maxInflated)); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
