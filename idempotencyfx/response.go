package idempotencyfx

import (
	"encoding/binary"
	"errors"
	"net/http"
)

// Response is a recorded HTTP response: what a replay sends back.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// The first byte of an encoded response says how the rest is stored. A
// reader that meets another value refuses the record instead of misreading
// it.
const (
	responseFormat   = 1 // status, headers, body as they are
	responseDeflated = 2 // the same, DEFLATE-compressed
)

// compressAbove is the size from which a recorded response is compressed:
// smaller ones gain nothing after Redis's allocation rounding.
const compressAbove = 512

// maxRecordBytes is the largest encoded response (status, headers and body,
// before compression) that is recorded and read back: a body of
// MaxResponseBytesLimit and 1 MiB of headers. encodeResponse refuses more,
// and so does the reader, so a replay is never shorter than its record.
const maxRecordBytes = MaxResponseBytesLimit + 1<<20

var errBadRecord = errors.New("idempotencyfx: unreadable recorded response")

// encodeResponse serialises a response in one compact binary blob, so a
// replay reads one field and does no JSON work:
//
//	format byte, uvarint status, uvarint header count,
//	per header: name (uvarint length + bytes), uvarint value count, values,
//	then the body to the end.
//
// ok is false when the encoding is larger than maxRecordBytes: such a
// response cannot be recorded.
func encodeResponse(status int, header http.Header, skip map[string]struct{}, body []byte) (blob []byte, ok bool) {
	size := 1 + 3 + 2 + len(body)
	n := 0
	for k, vs := range header {
		if _, s := skip[k]; s {
			continue
		}
		n++
		size += 2 + len(k) + 2
		for _, v := range vs {
			size += 2 + len(v)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, responseFormat)
	b = binary.AppendUvarint(b, uint64(status))
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range header {
		if _, s := skip[k]; s {
			continue
		}
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	if len(b)+len(body) > maxRecordBytes {
		return nil, false
	}
	b = append(b, body...)
	if len(b) > compressAbove {
		if z := deflate(b); len(z) < len(b)*9/10 {
			return z, true
		}
	}
	return b, true
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeResponse reads a blob written by encodeResponse. The body aliases
// the input.
func decodeResponse(b []byte) (Response, error) {
	if len(b) > 0 && b[0] == responseDeflated {
		raw, err := inflate(b[1:])
		if err != nil {
			return Response{}, errBadRecord
		}
		b = raw
	}
	if len(b) == 0 || b[0] != responseFormat {
		return Response{}, errBadRecord
	}
	d := decoder{b: b[1:]}
	status := d.uvarint()
	n := d.uvarint()
	if d.err != nil || status < 100 || status > 999 || n > uint64(len(d.b)) {
		return Response{}, errBadRecord
	}
	h := make(http.Header, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.str()
		nv := d.uvarint()
		if nv > uint64(len(d.b)) {
			return Response{}, errBadRecord
		}
		vs := make([]string, 0, nv)
		for j := uint64(0); j < nv && d.err == nil; j++ {
			vs = append(vs, d.str())
		}
		h[k] = vs
	}
	if d.err != nil {
		return Response{}, errBadRecord
	}
	return Response{Status: int(status), Header: h, Body: d.b}, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errBadRecord
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// write sends a recorded response, marked as a replay.
func (resp Response) write(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	h.Set(ReplayedHeader, "true")
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}

// ReplayedHeader marks a replayed response.
const ReplayedHeader = "Idempotent-Replayed"
