package idempotencyfx

import (
	"encoding/binary"
	"errors"
	"net/http"
	"net/textproto"
)

// Response is a recorded HTTP response: what a replay sends back.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// The first byte of an encoded response says how the rest is stored.
const (
	responseFormat   = 1 // status, headers, body as they are
	responseDeflated = 2 // the same, DEFLATE-compressed
)

// compressAbove is the size from which a recorded response is compressed.
const compressAbove = 512

// maxRecordBytes is the largest encoded response recorded and read back.
const maxRecordBytes = MaxResponseBytesLimit + 1<<20

var errBadRecord = errors.New("idempotencyfx: unreadable recorded response")

// encodeResponse serialises a response: format byte, status, header count,
// per header its name, value count and values (uvarints and length-prefixed
// strings), then the body. ok is false above maxRecordBytes.
func encodeResponse(status int, header http.Header, skip map[string]struct{}, body []byte) (blob []byte, ok bool) {
	n := 0
	for k := range header {
		if !skipped(skip, k) {
			n++
		}
	}
	b := make([]byte, 0, 512+len(body)) // room for the usual headers: one allocation
	b = append(b, responseFormat)
	b = binary.AppendUvarint(b, uint64(status))
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range header {
		if skipped(skip, k) {
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

// skipped reports whether header k is not recorded, however it is spelled.
func skipped(skip map[string]struct{}, k string) bool {
	_, s := skip[textproto.CanonicalMIMEHeaderKey(k)] // no allocation when k is canonical
	return s
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeResponse reads a blob of encodeResponse into a Response (its body a copy).
func decodeResponse(b []byte) (Response, error) {
	rp, err := decodeRecord(string(b))
	if err != nil {
		return Response{}, err
	}
	return Response{Status: rp.status, Header: rp.headerMap(), Body: []byte(rp.body)}, nil
}

// replay is a recorded response decoded without copying: every header's
// values share one array whose last slot holds the replay marker.
type replay struct {
	status int
	header []headerField // in the record's order; a replay assigns them, no map is built
	marker []string      // {"true"}, for ReplayedHeader
	body   string
}

// headerField is one recorded header: its canonical name and its values.
type headerField struct {
	name   string
	values []string
}

// headerMap is the recorded header as an http.Header (for Service.Get).
func (rp replay) headerMap() http.Header {
	h := make(http.Header, len(rp.header))
	for _, f := range rp.header {
		h[f.name] = f.values
	}
	return h
}

// decodeRecord reads a record written by encodeResponse.
func decodeRecord(s string) (replay, error) {
	if len(s) > 0 && s[0] == responseDeflated {
		raw, err := inflate(s[1:])
		if err != nil {
			return replay{}, errBadRecord
		}
		s = string(raw)
	}
	if len(s) == 0 || s[0] != responseFormat {
		return replay{}, errBadRecord
	}
	d := decoder{s: s[1:]}
	status := d.uvarint()
	n := d.uvarint()
	if d.err != nil || !recordableStatus(status) || n > uint64(len(d.s)) {
		return replay{}, errBadRecord
	}
	fields := make([]headerField, 0, n)
	values := make([]string, 0, n+1) // one value per header is the usual case; more grow it
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.str()
		nv := d.uvarint()
		if nv > uint64(len(d.s)) {
			return replay{}, errBadRecord
		}
		first := len(values)
		for j := uint64(0); j < nv && d.err == nil; j++ {
			values = append(values, d.str())
		}
		fields = append(fields, headerField{name: k, values: values[first:len(values):len(values)]}) // full: an append to it copies
	}
	if d.err != nil {
		return replay{}, errBadRecord
	}
	values = append(values, "true")
	return replay{status: int(status), header: fields, marker: values[len(values)-1:], body: d.s}, nil
}

// recordableStatus: a final status (101 included).
func recordableStatus(status uint64) bool {
	return status == http.StatusSwitchingProtocols || status >= 200 && status <= 999
}

// decoder reads the fields of an encoded record from its text.
type decoder struct {
	s   string
	err error
}

// uvarint reads an unsigned varint (encoding/binary's format).
func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint([]byte(d.s[:min(len(d.s), binary.MaxVarintLen64)]))
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.s = d.s[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.s)) {
		d.err = errBadRecord
		return ""
	}
	s := d.s[:n]
	d.s = d.s[n:]
	return s
}

// write sends a recorded response, marked as a replay.
func (rp replay) write(w http.ResponseWriter) {
	h := w.Header()
	for _, f := range rp.header {
		h[f.name] = f.values
	}
	h[ReplayedHeader] = rp.marker
	sendWithTrailers(w, rp.status, nil, rp.body)
}

// ReplayedHeader marks a replayed response.
const ReplayedHeader = "Idempotent-Replayed"
