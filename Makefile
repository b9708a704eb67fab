# Kollect — the two commands that matter: `make run` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

OUT        := _output
BIN        := $(OUT)/bin
TOOLS_BIN  := $(OUT)/tools/bin
GO         ?= go
FUZZTIME   ?= 10s
# Packages whose tests need nothing but Go and the embedded etcd.
UNIT_PKGS  := ./pkg/... ./cmd/...

export KOLLECT_BINARY    := $(abspath $(BIN)/kollect-apiserver)
export KOLLECT_TOOLS_BIN := $(abspath $(TOOLS_BIN))

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

.PHONY: check-go
check-go:
	@command -v $(GO) >/dev/null || { echo "make: Go is not installed (need Go 1.26, https://go.dev/dl)"; exit 1; }
	@$(GO) version | grep -qE 'go1\.(2[6-9]|[3-9][0-9])' || { echo "make: need Go 1.26 or newer, have: $$($(GO) version)"; exit 1; }

.PHONY: build
build: check-go ## build kollect-apiserver into _output/bin
	@echo "building kollect-apiserver..."
	@$(GO) build -o $(BIN)/kollect-apiserver ./cmd/kollect-apiserver
	@$(GO) build -o $(BIN)/kollect-local ./cmd/kollect-local

.PHONY: tools
tools: check-go ## build the pinned etcd, kube-apiserver, kube-controller-manager and kubectl (8-11 minutes the first time)
	@hack/build-tools.sh

.PHONY: run
run: build tools ## bring up a local cluster with Kollect registered, apply the examples, stay in the foreground
	@$(BIN)/kollect-local --dir $(OUT)/local --tools-dir $(TOOLS_BIN) --kollect-binary $(BIN)/kollect-apiserver --examples artifacts/examples

.PHONY: generate
generate: check-go ## regenerate deepcopy, conversions, OpenAPI, clientset, listers, informers
	@hack/update-codegen.sh

.PHONY: verify
verify: check-go ## generated code current, gofmt and go vet clean
	@echo "verifying generated code..."
	@hack/verify-codegen.sh
	@echo "gofmt..."
	@out=$$(gofmt -l cmd pkg test hack 2>/dev/null); [ -z "$$out" ] || { echo "gofmt needed on:"; echo "$$out"; exit 1; }
	@echo "go vet..."
	@$(GO) vet ./...

.PHONY: unit
.PHONY: services
services: ## make sure PostgreSQL and NATS (JetStream) run on loopback; starts them when down
	@bash hack/services.sh

unit: build tools services ## unit and registry tests (real embedded etcd, Postgres, NATS, git; the harness test starts a real cluster)
	@echo "unit and registry tests..."
	@$(GO) test -count=1 $(UNIT_PKGS)

.PHONY: fuzz
fuzz: check-go ## run every fuzz target for FUZZTIME each
	@hack/fuzz.sh $(FUZZTIME)

.PHONY: e2e
e2e: build tools services ## end-to-end tests through a real kube-apiserver
	@echo "end-to-end tests..."
	@$(GO) test -count=1 -p 1 -timeout 30m ./test/e2e/...

.PHONY: test
test: verify unit fuzz e2e ## everything CI runs
	@echo "make test: all suites passed"

.PHONY: bench
bench: build tools ## benchmarks; prints tables with figures and conditions
	@$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 90m ./test/bench/...

.PHONY: clean
clean: ## remove the local cluster's data and built binaries (keeps the pinned tools)
	rm -rf $(OUT)/local $(BIN)
