package tracingfx

import (
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// OTLP carries strings as protobuf strings, and protobuf refuses to encode
// one that is not valid UTF-8: the exporter then fails the whole request,
// and every span of the batch (up to 512, of other requests too) is lost
// because one request had a path like /%ff or a User-Agent in Latin-1. So
// every string is made valid before it is exported, each run of invalid
// bytes replaced by U+FFFD (strings.ToValidUTF8). Spans whose strings are all
// valid (nearly all) are passed on as they are, without a copy.

// validString is s with each run of invalid bytes replaced by U+FFFD.
func validString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// validValue is v with its strings made valid, and whether it changed.
func validValue(v attribute.Value) (attribute.Value, bool) {
	switch v.Type() {
	case attribute.STRING:
		if s := v.AsString(); !utf8.ValidString(s) {
			return attribute.StringValue(validString(s)), true
		}
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice()
		changed := false
		for i, s := range ss {
			if !utf8.ValidString(s) {
				ss[i], changed = validString(s), true // AsStringSlice returns a copy
			}
		}
		if changed {
			return attribute.StringSliceValue(ss), true
		}
	case attribute.SLICE:
		vs := v.AsSlice()
		changed := false
		for i, e := range vs {
			if e, ok := validValue(e); ok {
				vs[i], changed = e, true
			}
		}
		if changed {
			return attribute.SliceValue(vs...), true
		}
	case attribute.MAP:
		if kvs, ok := validAttributes(v.AsMap()); ok {
			return attribute.MapValue(kvs...), true
		}
	}
	return v, false
}

// validAttributes is kvs with valid keys and values, and whether any
// changed; kvs itself is never modified.
func validAttributes(kvs []attribute.KeyValue) ([]attribute.KeyValue, bool) {
	var out []attribute.KeyValue
	for i := range kvs {
		kv := &kvs[i]
		if plainValid(kv) {
			continue
		}
		v, changed := validValue(kv.Value)
		key := kv.Key
		if !utf8.ValidString(string(key)) {
			key, changed = attribute.Key(validString(string(key))), true
		}
		if !changed {
			continue
		}
		if out == nil {
			out = append([]attribute.KeyValue(nil), kvs...)
		}
		out[i] = attribute.KeyValue{Key: key, Value: v}
	}
	if out == nil {
		return kvs, false
	}
	return out, true
}

// plainValid reports whether kv is a valid key with a number, a bool or a
// valid string: nearly every attribute, checked without a copy.
func plainValid(kv *attribute.KeyValue) bool {
	switch kv.Value.Type() {
	case attribute.STRING:
		if !utf8.ValidString(kv.Value.AsString()) {
			return false
		}
	case attribute.BOOL, attribute.INT64, attribute.FLOAT64:
	default:
		return false
	}
	return utf8.ValidString(string(kv.Key))
}

// validSpan is a span whose name, attributes, events, links, status
// description and instrumentation scope were made valid UTF-8; the rest is
// the original's.
type validSpan struct {
	sdktrace.ReadOnlySpan
	name   string
	attrs  []attribute.KeyValue
	events []sdktrace.Event
	links  []sdktrace.Link
	status sdktrace.Status
	scope  instrumentation.Scope
}

// InstrumentationScope implements sdktrace.ReadOnlySpan.
func (s *validSpan) InstrumentationScope() instrumentation.Scope { return s.scope }

// InstrumentationLibrary implements sdktrace.ReadOnlySpan.
//
//nolint:staticcheck // SA1019: the interface still has it; it must agree
func (s *validSpan) InstrumentationLibrary() instrumentation.Library { return s.scope }

// Name implements sdktrace.ReadOnlySpan.
func (s *validSpan) Name() string { return s.name }

// Attributes implements sdktrace.ReadOnlySpan.
func (s *validSpan) Attributes() []attribute.KeyValue { return s.attrs }

// Events implements sdktrace.ReadOnlySpan.
func (s *validSpan) Events() []sdktrace.Event { return s.events }

// Links implements sdktrace.ReadOnlySpan.
func (s *validSpan) Links() []sdktrace.Link { return s.links }

// Status implements sdktrace.ReadOnlySpan.
func (s *validSpan) Status() sdktrace.Status { return s.status }

// validSpans is spans with the ones holding invalid UTF-8 replaced by a
// valid copy; spans itself is returned when all are valid.
func validSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for i, s := range spans {
		v, ok := validateSpan(s)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]sdktrace.ReadOnlySpan(nil), spans...)
		}
		out[i] = v
	}
	if out == nil {
		return spans
	}
	return out
}

// validateSpan returns a valid copy of s and true if s held invalid UTF-8;
// a valid span (nearly every one) costs no allocation.
func validateSpan(s sdktrace.ReadOnlySpan) (sdktrace.ReadOnlySpan, bool) {
	name, status := validString(s.Name()), s.Status()
	description := validString(status.Description)
	attrs, ca := validAttributes(s.Attributes())
	events, ce := validEvents(s.Events())
	links, cl := validLinks(s.Links())
	scope, cs := validScope(s.InstrumentationScope())
	if !ca && !ce && !cl && !cs && name == s.Name() && description == status.Description {
		return s, false
	}
	status.Description = description
	return &validSpan{ReadOnlySpan: s, name: name, attrs: attrs, events: events, links: links, status: status, scope: scope}, true
}

// validScope is sc with a valid name, version, schema URL and attributes,
// and whether any changed.
func validScope(sc instrumentation.Scope) (instrumentation.Scope, bool) {
	name, version, schema := validString(sc.Name), validString(sc.Version), validString(sc.SchemaURL)
	attrs, changed := validAttributes(sc.Attributes.ToSlice())
	if !changed && name == sc.Name && version == sc.Version && schema == sc.SchemaURL {
		return sc, false
	}
	out := instrumentation.Scope{Name: name, Version: version, SchemaURL: schema, Attributes: sc.Attributes}
	if changed {
		out.Attributes = attribute.NewSet(attrs...)
	}
	return out, true
}

// validResource is res with its strings made valid (the default service
// name holds the binary's file name, which need not be UTF-8).
func validResource(res *resource.Resource) *resource.Resource {
	attrs, changed := validAttributes(res.Attributes())
	if !changed && utf8.ValidString(res.SchemaURL()) {
		return res
	}
	return resource.NewWithAttributes(validString(res.SchemaURL()), attrs...)
}

// validEvents is events with valid names and attributes, and whether any
// changed; events itself is never modified.
func validEvents(events []sdktrace.Event) ([]sdktrace.Event, bool) {
	var out []sdktrace.Event
	for i, e := range events {
		name := validString(e.Name)
		attrs, c := validAttributes(e.Attributes)
		if !c && name == e.Name {
			continue
		}
		if out == nil {
			out = append([]sdktrace.Event(nil), events...)
		}
		out[i].Name, out[i].Attributes = name, attrs
	}
	if out == nil {
		return events, false
	}
	return out, true
}

// validLinks is links with valid attributes, and whether any changed.
func validLinks(links []sdktrace.Link) ([]sdktrace.Link, bool) {
	var out []sdktrace.Link
	for i, l := range links {
		attrs, c := validAttributes(l.Attributes)
		if !c {
			continue
		}
		if out == nil {
			out = append([]sdktrace.Link(nil), links...)
		}
		out[i].Attributes = attrs
	}
	if out == nil {
		return links, false
	}
	return out, true
}

// validRecords is records with the ones holding invalid UTF-8 (body,
// attributes, severity text, event name) replaced by a valid clone; the
// SDK asks an exporter to clone a record before changing it.
func validRecords(records []sdklog.Record) []sdklog.Record {
	var out []sdklog.Record
	for i := range records {
		r := &records[i]
		if recordValid(r) {
			continue
		}
		if out == nil {
			out = append([]sdklog.Record(nil), records...)
		}
		attrs := make([]attribute.KeyValue, 0, r.AttributesLen())
		r.WalkAttributes(func(kv attribute.KeyValue) bool {
			attrs = append(attrs, kv)
			return true
		})
		attrs, _ = validAttributes(attrs)
		body, _ := validValue(r.Body())
		c := r.Clone()
		c.SetBody(body)
		c.SetAttributes(attrs...)
		c.SetSeverityText(validString(r.SeverityText()))
		c.SetEventName(validString(r.EventName()))
		out[i] = c
	}
	if out == nil {
		return records
	}
	return out
}

// recordValid: every string of r is valid UTF-8.
func recordValid(r *sdklog.Record) bool {
	if _, changed := validValue(r.Body()); changed {
		return false
	}
	if !utf8.ValidString(r.SeverityText()) || !utf8.ValidString(r.EventName()) {
		return false
	}
	valid := true
	r.WalkAttributes(func(kv attribute.KeyValue) bool {
		_, changed := validValue(kv.Value)
		valid = !changed && utf8.ValidString(string(kv.Key))
		return valid
	})
	return valid
}
