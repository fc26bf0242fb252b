package idempotencyfx

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"strings"
	"sync"
)

// Recorded responses above compressAbove bytes are stored DEFLATE-compressed
// when that saves a tenth (Redis memory grows with DefaultTTL); writers and
// readers are pooled.
var (
	writers = sync.Pool{New: func() any {
		w, _ := flate.NewWriter(nil, flate.BestSpeed)
		return w
	}}
	readers = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}
)

var errRecordTooLarge = errors.New("idempotencyfx: recorded response larger than the readable limit")

// deflate returns responseDeflated, then the compressed encoding.
func deflate(payload []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(payload)/2 + 16)
	buf.WriteByte(responseDeflated)
	w, _ := writers.Get().(*flate.Writer)
	w.Reset(&buf)
	_, _ = w.Write(payload)
	_ = w.Close()
	writers.Put(w)
	return buf.Bytes()
}

// inflate decompresses a stored response; more than maxRecordBytes is refused.
func inflate(z string) ([]byte, error) {
	rs, _ := readers.Get().(flate.Resetter)
	defer readers.Put(rs)
	if err := rs.Reset(strings.NewReader(z), nil); err != nil {
		return nil, err
	}
	r, _ := rs.(io.Reader) // flate.NewReader's is both
	var out bytes.Buffer
	out.Grow(min(len(z)*3, maxRecordBytes))
	if _, err := out.ReadFrom(io.LimitReader(r, maxRecordBytes+1)); err != nil {
		return nil, err
	}
	if out.Len() > maxRecordBytes {
		return nil, errRecordTooLarge
	}
	return out.Bytes(), nil
}
