# redisfx developer targets. `make test` is the command CI runs.
GO        ?= go
PKGS      ?= ./...
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test test-cluster test-short demo bench bench-smoke fuzz soak chaos lint fmt

## test: the full suite with the race detector (needs redis-server on PATH).
test:
	$(GO) test -race -count=1 -timeout 12m $(PKGS)

## test-short: skips the slow cluster and end-to-end tests.
test-short:
	$(GO) test -race -count=1 -short $(PKGS)

## test-cluster: the idempotency suite against a local Redis Cluster (3 masters, 3 replicas per test).
test-cluster:
	REDISFX_TEST_CLUSTER=1 $(GO) test -race -count=1 -timeout 15m ./idempotencyfx

## demo: run the payments example on :8080.
demo:
	$(GO) run ./examples/payments

## bench: the micro-benchmarks (each against its bare-command baseline), then the load table.
bench:
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -count 3 ./idempotencyfx ./tracingfx ./cachefx ./lockfx ./ratelimitfx ./streamfx
	$(GO) run ./bench/run -c 32 -d 5s -repeat 3

## bench-smoke: every benchmark once, and the load table briefly (CI).
bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
	$(GO) run ./bench/run -c 4 -d 300ms -repeat 1

## lint: gofmt, go vet, staticcheck.
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "the files above are not gofmt-ed"; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

## fmt: gofmt every Go file.
fmt:
	gofmt -w $$(git ls-files '*.go')

## fuzz: each fuzz target for FUZZTIME (default 10m), one core each, one after another.
FUZZTIME ?= 10m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) -parallel 1 ./idempotencyfx
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalJSON$$' -fuzztime $(FUZZTIME) -parallel 1 ./idempotencyfx
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeResponse$$' -fuzztime $(FUZZTIME) -parallel 1 ./idempotencyfx
	$(GO) test -run '^$$' -fuzz '^FuzzParseURL$$' -fuzztime $(FUZZTIME) -parallel 1 ./storefx
	$(GO) test -run '^$$' -fuzz '^FuzzClientIP$$' -fuzztime $(FUZZTIME) -parallel 1 ./ratelimitfx

## soak: 10 minutes of mixed load on the payments example; goroutines and memory sampled.
soak:
	$(GO) run ./bench/soak -d 10m -c 8

## chaos: the fault, scale-out, takeover and cluster suites, three times over.
chaos:
	$(GO) test -race -count=3 -run 'Faults|ScaleOut|KilledProcess|Cluster|Hostile|Secrets|StoreDown' ./idempotencyfx ./examples/payments ./storefx ./cachefx ./ratelimitfx ./streamfx
