# redisfx developer targets. `make test` is the command CI runs.
GO        ?= go
PKGS      ?= ./...
# golangci-lint is pinned here and only here; .golangci.yml says what it checks.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
# apidiff (golang.org/x/exp/cmd/apidiff) compares the exported API with the previous release.
APIDIFF_VERSION ?= v0.0.0-20261113113407-e3970619a1a4
APIDIFF ?= $(GO) run golang.org/x/exp/cmd/apidiff@$(APIDIFF_VERSION)
MODULE  := github.com/redisfx/redisfx

.PHONY: test test-deps test-cluster test-sentinel test-short test-flaky demo bench bench-smoke fuzz soak chaos lint tidy-lint tree-lint fmt e2e-observability release-check api-check

## test: the full suite with the race detector. Installs redis-server (and the Prometheus tools) with apt-get when missing and allowed, else says what to install.
test: test-deps
	$(GO) test -race -count=1 -timeout 12m $(PKGS)

## test-deps: the programs the tests need (.ci/test-deps).
test-deps:
	@.ci/test-deps

## test-flaky: the tests that once failed by chance on a loaded machine, three times each (CI's guard).
test-flaky:
	$(GO) test -race -count=3 -run '^(TestGiveBack_RedisOutOfMemory_LateDeliveryFreedSoon|TestAcquire_GaveUpAsTheBreakerOpened_GiveBackSentThroughIt|TestRenewal_StallOfEveryConnection_WithinMargins_LockKept|TestRenewal_StalledConnection_LockKept|TestAutoRenewKeepsLockPastTTL_CrashedHolderExpires)$$' ./lockfx
	$(GO) test -race -count=3 -run '^(TestClusterHealth_DeadMasterIsDown|TestBreaker_CountsTheCallersCommandsNotHandshakes|TestBreaker_ReopenedWhileAProbeHangs_ProbesStayOneAtATime)$$' ./storefx
	$(GO) test -race -count=3 -run '^(TestExactlyLimitAcrossTwoInstances|TestCluster_ExactPerClientAcrossMasters)$$' ./ratelimitfx
	$(GO) test -race -count=3 -run '^(TestModule_StopGivesLateOutcomesABoundedGrace|TestLateCompletion_RedisRestarted_PoolRedials_RunsOnce)$$' ./idempotencyfx
	$(GO) test -race -count=3 -run '^(TestInvalidateByTags_ValueInItsLastMillisecondIsStillFound)$$' ./cachefx
	$(GO) test -race -count=3 -run '^(TestOTLP_DeadBackend_NeitherSlowsWorkNorHangsShutdown|TestOTLP_SlowBackend_NeitherSlowsWorkNorHangsShutdown)$$' ./tracingfx
	$(GO) test -race -count=3 -run '^(TestPayments_RedisFrozen_MetricsAndReadyzAnswerAtOnce)$$' ./examples/payments
	$(GO) test -race -count=3 -run '^(TestModes|TestLose_OutlivesSetModeForward)$$' ./internal/faultproxy

## test-short: skips the slow cluster and end-to-end tests.
test-short:
	$(GO) test -race -count=1 -short $(PKGS)

## test-cluster: the idempotency suite against a local Redis Cluster (3 masters, 3 replicas per test).
test-cluster:
	REDISFX_TEST_CLUSTER=1 $(GO) test -race -count=1 -timeout 15m ./idempotencyfx

## test-sentinel: the idempotency checker against one master, two replicas and three Sentinels (the master killed, slept, paused).
test-sentinel:
	REDISFX_TEST_SENTINEL=1 $(GO) test -race -count=1 -timeout 5m -run '^TestIdempotencyChecker_Sentinel$$' -v ./idempotencyfx

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
	$(GO) run ./bench/run -c 4 -d 300ms -repeat 1 -gen go
	@if command -v wrk >/dev/null; then $(GO) run ./bench/run -c 4 -d 1s -repeat 1 -gen wrk -servers plain,stack; fi

## lint: golangci-lint (vet, staticcheck, revive, godot, errorlint, … and gofmt/goimports), go.mod tidiness, no build output in git.
lint: tidy-lint tree-lint
	$(GOLANGCI_LINT) run ./...
	cd bench/assembled && $(GOLANGCI_LINT) run ./...

## tidy-lint: go.mod and go.sum are tidy (the root's and bench/assembled's, a module of its own).
tidy-lint:
	$(GO) mod tidy -diff
	cd bench/assembled && $(GO) mod tidy -diff

## tree-lint: no tracked file is a binary or larger than 1 MB (every consumer of the module downloads them).
tree-lint:
	@bad=$$(git ls-files -z | xargs -0 -r sh -c 'for f; do [ -f "$$f" ] || continue; \
	  size=$$(wc -c <"$$f"); if [ "$$size" -gt 1048576 ]; then echo "$$f: $$size bytes"; continue; fi; \
	  case "$$(head -c 4 "$$f" | od -An -tx1 | tr -d " \n")" in 7f454c46|4d5a*|cffaedfe|cefaedfe|feedface|feedfacf) echo "$$f: an executable";; esac; \
	done' sh); if [ -n "$$bad" ]; then echo "$$bad"; echo "build output belongs in .gitignore"; exit 1; fi

## fmt: format every Go file as lint wants it (gofmt and goimports with our import groups).
fmt:
	$(GOLANGCI_LINT) fmt ./...

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

## chaos: the fault, scale-out, takeover and cluster suites, three times over; then the
## randomized checkers, each seed for CHECK_DURATION (default 10m; make test runs them briefly).
CHECK_DURATION ?= 10m
chaos:
	$(GO) test -race -count=3 -run 'Faults|ScaleOut|KilledProcess|Cluster|Hostile|Secrets|StoreDown' ./idempotencyfx ./examples/payments ./storefx ./cachefx ./ratelimitfx ./streamfx
	REDISFX_CHECK_DURATION=$(CHECK_DURATION) $(GO) test -race -count=1 -timeout 0 -run '^TestCacheChecker$$' -v ./cachefx
	REDISFX_CHECK_DURATION=$(CHECK_DURATION) $(GO) test -race -count=1 -timeout 0 -run '^TestLockChecker$$' -v ./lockfx
	REDISFX_CHECK_DURATION=$(CHECK_DURATION) $(GO) test -race -count=1 -timeout 0 -run '^TestIdempotencyChecker$$' -v ./idempotencyfx

	REDISFX_CHECK_DURATION=$(CHECK_DURATION) $(GO) test -race -count=1 -timeout 0 -run '^TestRateLimitChecker$$' -v ./ratelimitfx
	REDISFX_CHECK_DURATION=$(CHECK_DURATION) $(GO) test -race -count=1 -timeout 0 -run '^TestStreamsChecker$$' -v ./streamfx

## e2e-observability: the payments example as an operator runs it: a real Prometheus (generated rules, sped up 60 times) and Alertmanager routing to local webhooks, spans to a backend the test queries; each alert fires, reaches its receivers and resolves in time (about 5 minutes).
e2e-observability: test-deps
	REDISFX_E2E_OBSERVABILITY=1 $(GO) test -race -count=1 -v -timeout 20m ./e2e/observability

## release-check: run before tagging a version: go.mod tidy, lint, the exported API against the previous tag, then the full suite.
release-check: lint api-check test

## api-check: the exported API (internal packages aside) against the latest vX.Y.Z tag before HEAD (HEAD's own tag aside); an incompatible change fails from v1 on, and before v1 is listed (each belongs under Changed or Removed in CHANGELOG.md).
api-check:
	@prev=$$(git describe --tags --abbrev=0 --match 'v[0-9]*.[0-9]*.[0-9]*' --exclude '*-*' HEAD^ 2>/dev/null); \
	if [ -z "$$prev" ]; then echo "api-check: no previous release tag (vX.Y.Z): nothing to compare, this is the first release"; exit 0; fi; \
	old=$$(mktemp -d); trap 'rm -rf "$$old"' EXIT; \
	git archive "$$prev" | tar -x -C "$$old" && \
	(cd "$$old" && $(APIDIFF) -m -w "$$old/api" $(MODULE) 2>"$$old/err") && \
	diff=$$($(APIDIFF) -m -incompatible "$$old/api" $(MODULE) 2>"$$old/err") || { grep -v '^Ignoring internal' "$$old/err"; exit 1; }; \
	if [ -z "$$diff" ]; then echo "api-check: the exported API is compatible with $$prev"; exit 0; fi; \
	echo "api-check: incompatible changes since $$prev:"; echo "$$diff"; \
	case "$$prev" in v0.*) echo "api-check: allowed before v1.0.0; list each under Changed or Removed in CHANGELOG.md";; \
	*) echo "api-check: an incompatible change needs a new major version"; exit 1;; esac
