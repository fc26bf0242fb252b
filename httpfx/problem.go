package httpfx

import (
	"encoding/json"
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
}

// NewProblem returns a problem of type about:blank with the status phrase as
// its title.
func NewProblem(status int, code, detail string) Problem {
	return Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// Write sends p as the response: Content-Type application/problem+json,
// Cache-Control no-store (a problem is about one request and must never be
// cached), and Retry-After when set.
func (p Problem) Write(w http.ResponseWriter) {
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	if p.RetryAfter > 0 {
		secs := int64((p.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	body, _ := json.Marshal(p) // cannot fail: strings and ints only
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
