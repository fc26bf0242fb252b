# redisfx developer targets. `make test` is the command CI runs.
GO        ?= go
PKGS      ?= ./...
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test test-short demo bench lint fmt cover

## test: the full suite with the race detector (needs redis-server on PATH).
test:
	$(GO) test -race -count=1 -timeout 12m $(PKGS)

## test-short: skips the slow cluster and end-to-end tests.
test-short:
	$(GO) test -race -count=1 -short $(PKGS)

## demo: run the payments example on :8080.
demo:
	$(GO) run ./examples/payments

## bench: every benchmark, 3 runs each.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 $(PKGS)

## lint: gofmt, go vet, staticcheck.
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above are not formatted"; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')
