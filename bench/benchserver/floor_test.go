package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/redistest"
)

// The SDK floor in process (floor.go): the limit on net/http, untraced
// (the baseline) and traced with the bare OpenTelemetry SDK at 10 %, to
// set beside BenchmarkStack_*OTLP10 and BenchmarkStack_*NoTracing: the
// CPU that tracing adds to the stack over what it adds here is tracingfx's
// own.

func floorRouter(b *testing.B, traced bool) http.Handler {
	b.Helper()
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		b.Setenv(k, "")
	}
	if traced {
		for _, kv := range otlpReceiver(b, "0.1") {
			k, v, _ := strings.Cut(kv, "=")
			b.Setenv(k, v)
		}
	}
	opts, err := redis.ParseURL(redistest.Start(b).URL())
	if err != nil {
		b.Fatal(err)
	}
	h, stop := floorHandler(opts, redistest.Prefix(b), traced)
	b.Cleanup(stop)
	return h
}

func BenchmarkFloor_NoKey(b *testing.B) {
	serveStack(b, floorRouter(b, false), func(int) string { return "" })
}

func BenchmarkFloor_NoKeyOTLP10(b *testing.B) {
	serveStack(b, floorRouter(b, true), func(int) string { return "" })
}

func BenchmarkFloor_NewKey(b *testing.B) {
	serveStack(b, floorRouter(b, false), func(i int) string { return "new-" + strconv.Itoa(i) })
}

func BenchmarkFloor_NewKeyOTLP10(b *testing.B) {
	serveStack(b, floorRouter(b, true), func(i int) string { return "new-" + strconv.Itoa(i) })
}

func BenchmarkFloor_Replay(b *testing.B) {
	serveStack(b, floorRouter(b, false), func(int) string { return "replayed" })
}

func BenchmarkFloor_ReplayOTLP10(b *testing.B) {
	serveStack(b, floorRouter(b, true), func(int) string { return "replayed" })
}
