package tracingfx

import (
	"slices"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Protobuf refuses to encode a string that is not valid UTF-8, and the
// OTLP exporter then fails the whole request, every span of the batch. So
// a batch that failed is exported again with its strings made valid, when
// some were not.

// validString is s with each run of invalid bytes replaced by U+FFFD.
func validString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// isValid reports whether v's strings are valid UTF-8.
func isValid(v attribute.Value) bool {
	switch v.Type() {
	case attribute.STRING:
		return utf8.ValidString(v.AsString())
	case attribute.STRINGSLICE:
		return !slices.ContainsFunc(v.AsStringSlice(), func(s string) bool { return !utf8.ValidString(s) })
	case attribute.SLICE:
		return !slices.ContainsFunc(v.AsSlice(), func(e attribute.Value) bool { return !isValid(e) })
	case attribute.MAP:
		return allValid(v.AsMap())
	}
	return true
}

// allValid reports whether the keys and values of kvs are valid UTF-8.
func allValid(kvs []attribute.KeyValue) bool {
	return !slices.ContainsFunc(kvs, func(kv attribute.KeyValue) bool { return !utf8.ValidString(string(kv.Key)) || !isValid(kv.Value) })
}

// validValue is v with its strings made valid.
func validValue(v attribute.Value) attribute.Value {
	switch v.Type() {
	case attribute.STRING:
		return attribute.StringValue(validString(v.AsString()))
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice() // a copy
		for i, s := range ss {
			ss[i] = validString(s)
		}
		return attribute.StringSliceValue(ss)
	case attribute.SLICE:
		vs := v.AsSlice() // a copy
		for i, e := range vs {
			vs[i] = validValue(e)
		}
		return attribute.SliceValue(vs...)
	case attribute.MAP:
		return attribute.MapValue(validAttributes(v.AsMap())...)
	}
	return v
}

// validAttributes is a copy of kvs with valid keys and values.
func validAttributes(kvs []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = attribute.KeyValue{Key: attribute.Key(validString(string(kv.Key))), Value: validValue(kv.Value)}
	}
	return out
}

// validSpans is a copy of spans with the ones holding invalid UTF-8
// replaced by a valid copy; nil when all are valid.
func validSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for i, s := range spans {
		if spanValid(s) {
			continue
		}
		if out == nil { // the first invalid one
			out = slices.Clone(spans)
		}
		out[i] = validSpan(s)
	}
	return out
}

// spanValid reports whether every string of s is valid UTF-8.
func spanValid(s sdktrace.ReadOnlySpan) bool {
	sc := s.InstrumentationScope()
	if !utf8.ValidString(s.Name()) || !utf8.ValidString(s.Status().Description) || !allValid(s.Attributes()) ||
		!utf8.ValidString(sc.Name) || !utf8.ValidString(sc.Version) || !utf8.ValidString(sc.SchemaURL) ||
		!allValid(sc.Attributes.ToSlice()) {
		return false
	}
	return !slices.ContainsFunc(s.Events(), func(e sdktrace.Event) bool { return !utf8.ValidString(e.Name) || !allValid(e.Attributes) }) &&
		!slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool { return !allValid(l.Attributes) })
}

// validSpan is a copy of s with every string made valid.
func validSpan(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	c := tracetest.SpanStubFromReadOnlySpan(s)
	c.Name, c.Status.Description = validString(c.Name), validString(c.Status.Description)
	c.Attributes = validAttributes(c.Attributes)
	c.Events, c.Links = slices.Clone(c.Events), slices.Clone(c.Links)
	for i := range c.Events {
		c.Events[i].Name, c.Events[i].Attributes = validString(c.Events[i].Name), validAttributes(c.Events[i].Attributes)
	}
	for i := range c.Links {
		c.Links[i].Attributes = validAttributes(c.Links[i].Attributes)
	}
	sc := &c.InstrumentationScope
	sc.Name, sc.Version, sc.SchemaURL = validString(sc.Name), validString(sc.Version), validString(sc.SchemaURL)
	sc.Attributes = attribute.NewSet(validAttributes(sc.Attributes.ToSlice())...)
	c.InstrumentationLibrary = *sc //nolint:staticcheck // SA1019: Snapshot falls back to it for an empty scope
	return c.Snapshot()
}

// validResource is res with its strings made valid (the default service
// name holds the binary's file name, which need not be UTF-8).
func validResource(res *resource.Resource) *resource.Resource {
	if allValid(res.Attributes()) && utf8.ValidString(res.SchemaURL()) {
		return res
	}
	return resource.NewWithAttributes(validString(res.SchemaURL()), validAttributes(res.Attributes())...)
}

// validRecords is a copy of records with the ones holding invalid UTF-8
// (body, attributes, severity text, event name) replaced by a valid clone
// (the SDK asks an exporter to clone a record before changing it); nil
// when all are valid.
func validRecords(records []sdklog.Record) []sdklog.Record {
	var out []sdklog.Record
	for i := range records {
		r := &records[i]
		if recordValid(r) {
			continue
		}
		if out == nil { // the first invalid one
			out = slices.Clone(records)
		}
		var attrs []attribute.KeyValue
		r.WalkAttributes(func(kv attribute.KeyValue) bool {
			attrs = append(attrs, kv)
			return true
		})
		out[i] = r.Clone()
		out[i].SetBody(validValue(r.Body()))
		out[i].SetAttributes(validAttributes(attrs)...)
		out[i].SetSeverityText(validString(r.SeverityText()))
		out[i].SetEventName(validString(r.EventName()))
	}
	return out
}

// recordValid reports whether every string of r is valid UTF-8.
func recordValid(r *sdklog.Record) bool {
	valid := isValid(r.Body()) && utf8.ValidString(r.SeverityText()) && utf8.ValidString(r.EventName())
	r.WalkAttributes(func(kv attribute.KeyValue) bool {
		valid = valid && utf8.ValidString(string(kv.Key)) && isValid(kv.Value)
		return valid
	})
	return valid
}
