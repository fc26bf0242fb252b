package httpfx

import (
	"cmp"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"strconv"
	"time"
)

// ProblemContentType is the media type of RFC 9457 problem details.
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object. Every error response of
// redisfx is one, with a stable Code beside the standard members.
type Problem struct {
	// Type is a URI reference that identifies the problem type. Default
	// "about:blank", in which case Title is the HTTP status phrase.
	Type string `json:"type"`
	// Title is a short, human-readable summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Instance identifies this occurrence (for example the request path).
	Instance string `json:"instance,omitempty"`
	// Code is a stable, machine-readable error code, such as
	// "idempotency_key_reused".
	Code string `json:"code,omitempty"`
	// RetryAfter, when positive, is sent as a Retry-After header (whole
	// seconds, rounded up).
	RetryAfter time.Duration `json:"-"`
	// Extensions are extension members (RFC 9457 §3.2), written beside the
	// standard members; a key naming a standard member is ignored.
	Extensions map[string]any `json:"-"`
}

// problemMembers are the members Problem writes itself.
var problemMembers = map[string]bool{"type": true, "title": true, "status": true, "detail": true, "instance": true, "code": true}

// problemJSON is Problem without its methods, for encoding/json.
type problemJSON Problem

// MarshalJSON writes the standard members, then the extension members in
// key order.
func (p Problem) MarshalJSON() ([]byte, error) {
	body, err := json.Marshal(problemJSON(p))
	if err != nil || len(p.Extensions) == 0 {
		return body, err
	}
	ext := maps.Clone(p.Extensions)
	maps.DeleteFunc(ext, func(k string, _ any) bool { return problemMembers[k] })
	if len(ext) == 0 {
		return body, nil
	}
	more, err := json.Marshal(ext)
	if err != nil {
		return nil, err
	}
	return append(append(body[:len(body)-1], ','), more[1:]...), nil
}

// UnmarshalJSON reads a problem, keeping members it does not know in
// Extensions.
func (p *Problem) UnmarshalJSON(data []byte) error {
	var std problemJSON
	if err := json.Unmarshal(data, &std); err != nil {
		return err
	}
	var all map[string]any
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	*p = Problem(std)
	maps.DeleteFunc(all, func(k string, _ any) bool { return problemMembers[k] })
	if len(all) > 0 {
		p.Extensions = all
	}
	return nil
}

// NewProblem returns a problem of type about:blank with the status phrase as
// its title.
func NewProblem(status int, code, detail string) Problem {
	return Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// Write sends p as the response, with Cache-Control no-store and
// Retry-After when set.
func (p Problem) Write(w http.ResponseWriter) {
	p.Status = cmp.Or(p.Status, http.StatusInternalServerError)
	p.Type = cmp.Or(p.Type, "about:blank")
	p.Title = cmp.Or(p.Title, http.StatusText(p.Status))
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 { // rounded up, without wrapping near the largest Duration
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(p.RetryAfter.Seconds())), 10))
	}
	body, err := p.MarshalJSON() // not json.Marshal, which compacts it again
	if err != nil {              // an extension that does not marshal: without them
		p.Extensions = nil
		body, _ = p.MarshalJSON() // cannot fail: strings and ints only
	}
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body))) // complete even if the handler never returns
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
