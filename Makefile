# Kollect — the two commands that matter: `make run` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

OUTDIR     := _output
BIN        := $(OUTDIR)/bin
TOOLS_BIN  := $(OUTDIR)/tools/bin
GO         ?= go
FUZZTIME   ?= 10s
# Unit and registry test packages (embedded etcd, the machine's PostgreSQL
# and NATS, git; the harness test starts a real cluster), and the check
# that docs/architecture.md names real packages and functions ...
UNIT_PKGS  := ./pkg/... ./cmd/... ./test/eventfold/... ./test/docs/...
# ... but for the controller packages, which run under the race detector
# (make race, hack/race.sh): every package this pattern names, listed with
# go list at run time, so new ones are picked up.
export RACE_PKGS := ./pkg/controllers/...
# What a platform team installs: the image, the alert rules and dashboard.
# (The chart's install test is an e2e package, test/e2e/chart.)
RELEASE_PKGS := ./test/image/... ./test/monitoring/...
# The image reference, one variable for `make image` (the chart's
# image.repository and appVersion are its default).
IMAGE ?=

# One set of build settings for everything make runs (build, vet, tests,
# fuzzing) and for the pinned tools and the image (hack/build-tools.sh,
# hack/build-image.sh): static, path-free builds whose compiled packages the
# Go build cache shares between them, so a cold run compiles
# k8s.io/apiserver and its kin once, not three times. The one exception is
# the race step (hack/race.sh): the race detector needs cgo, so it alone
# builds with CGO_ENABLED=1.
export CGO_ENABLED := 0
export GOFLAGS     := $(strip $(GOFLAGS) -trimpath)

export KOLLECT_BINARY    := $(abspath $(BIN)/kollect-apiserver)
# The pinned tools: _output/tools/bin unless KOLLECT_TOOLS_BIN names another
# place (as for hack/build-tools.sh, which builds them there when missing).
export KOLLECT_TOOLS_BIN ?= $(abspath $(TOOLS_BIN))

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: check-go
check-go:
	@command -v $(GO) >/dev/null || { echo "make: Go is not installed (need Go 1.26, https://go.dev/dl)"; exit 1; }
	@$(GO) version | grep -qE 'go1\.(2[6-9]|[3-9][0-9])' || { echo "make: need Go 1.26 or newer, have: $$($(GO) version)"; exit 1; }

.PHONY: check-cc
check-cc: check-go ## check that cgo has a C compiler, for the race step (gcc and libc6-dev on Debian)
	@hack/check-cc.sh

# What make test needs on the machine, checked before anything is built.
.PHONY: preflight
preflight: check-go check-cc services
	@command -v flock >/dev/null || { echo "make: flock is missing (package util-linux): the tests that use PostgreSQL take turns through it (hack/postgres-lock.sh)"; exit 1; }

.PHONY: deps
deps: check-go ## download the Go modules the build needs (with progress)
	@hack/download-modules.sh

.PHONY: build
build: check-go deps ## build kollect-apiserver into _output/bin
	@echo "building kollect-apiserver..."
	@$(GO) build -o $(BIN)/kollect-apiserver ./cmd/kollect-apiserver
	@$(GO) build -o $(BIN)/kollect-local ./cmd/kollect-local

.PHONY: tools
tools: check-go ## build the pinned etcd, kube-apiserver, kube-controller-manager, kubectl, helm and promtool (10-14 minutes the first time)
	@hack/build-tools.sh

.PHONY: run
run: build ## bring up a local cluster with Kollect registered, apply the examples, stay in the foreground
	@hack/build-tools.sh kube
	@$(BIN)/kollect-local --dir $(OUTDIR)/local --tools-dir $(KOLLECT_TOOLS_BIN) --kollect-binary $(BIN)/kollect-apiserver --examples artifacts/examples

.PHONY: generate
generate: check-go ## regenerate deepcopy, conversions, OpenAPI, clientset, listers, informers
	@hack/update-codegen.sh

.PHONY: manifests
manifests: check-go ## render artifacts/deploy and artifacts/monitoring from the chart
	@hack/update-manifests.sh

.PHONY: image
image: check-go ## build the kollect-apiserver OCI image without a Docker engine (_output/image)
	@IMAGE="$(IMAGE)" hack/build-image.sh

.PHONY: verify
verify: check-go deps ## generated code and manifests current, gofmt and go vet clean
	@echo "verifying generated code..."
	@hack/verify-codegen.sh
	@echo "verifying the manifests rendered from the chart..."
	@hack/verify-manifests.sh
	@echo "gofmt..."
	@out=$$(gofmt -l cmd pkg test hack 2>/dev/null); [ -z "$$out" ] || { echo "gofmt needed on:"; echo "$$out"; exit 1; }
	@echo "go vet..."
	@$(GO) vet ./...

.PHONY: services
services: ## make sure PostgreSQL and NATS (JetStream) run on loopback; starts them when down
	@bash hack/services.sh

.PHONY: unit
unit: build services ## unit and registry tests but for the controller packages (make race runs those)
	@hack/build-tools.sh kube
	@echo "unit and registry tests (not $(RACE_PKGS): make race runs them)..."
	@race=$$($(GO) list $(RACE_PKGS)); pkgs=$$($(GO) list $(UNIT_PKGS) | grep -vxF "$$race"); \
		$(GO) test -count=1 -exec "$(CURDIR)/hack/postgres-lock.sh" $$pkgs

.PHONY: race
race: check-cc deps services ## the controller packages' unit tests under the race detector (the one step with cgo on)
	@hack/race.sh

.PHONY: release-check
release-check: build ## the image (built and run unpacked) and the alert rules (promtool check and unit tests)
	@hack/build-tools.sh promtool
	@echo "image and monitoring tests..."
	@$(GO) test -count=1 -timeout 30m $(RELEASE_PKGS)

.PHONY: fuzz
fuzz: check-go ## run every fuzz target for FUZZTIME each
	@hack/fuzz.sh $(FUZZTIME)

.PHONY: e2e
e2e: build services ## end-to-end tests through a real kube-apiserver (the chart's install too)
	@hack/build-tools.sh kube helm promtool
	@echo "end-to-end tests, in two lanes (hack/e2e.sh)..."
	@hack/e2e.sh -timeout 30m

.PHONY: test
test: check-go ## everything CI runs, scheduled for 2 cores (hack/test.sh: which step runs when, and what each took)
	@hack/test.sh

# Knobs (test/bench/*_test.go): KOLLECT_BENCH_SIZES and KOLLECT_BENCH_EXPORT_SIZES (item counts,
# comma-separated; default 10000,100000), KOLLECT_BENCH_IDLE_INVENTORIES (default 1000; 0: none),
# KOLLECT_BENCH_IDLE_SETTLE (1m), KOLLECT_BENCH_IDLE_WINDOW (2m), KOLLECT_BENCH_IDLE_ONLY=1 (no API
# comparison), KOLLECT_BENCH_API_PASSES (3: API comparisons pooled), KOLLECT_BENCH_PPROF=dir (profiles),
# KOLLECT_BENCH_FLEET_OBJECTS (20000 ConfigMaps in each of 3 members), KOLLECT_BENCH_FLEET_LISTS (20
# timed lists of each kind), BENCH (a -bench regexp, default .: BENCH=Fleet runs BenchmarkFleet
# alone). BenchmarkExport needs PostgreSQL and NATS (make services).
BENCH ?= .
.PHONY: bench
bench: build ## benchmarks; prints tables with figures and conditions
	@hack/build-tools.sh kube
	@$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 120m ./test/bench/...

.PHONY: clean
clean: ## remove the local cluster's data and built binaries (keeps the pinned tools)
	rm -rf $(OUTDIR)/local $(BIN)
