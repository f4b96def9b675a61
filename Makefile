# Outpost build, run and test entry points (GNU make).
#   make build   bin/outpost and bin/outpost-edge
#   make run     build, then run a hub and two edge nodes with their state in ./.outpost/
#   make test    everything CI runs: vet, gofmt check, go test -race
#   make test-containerd2   the containerd tests again on containerd 2.x, built from the Go module proxy
#   make bench   the store, API (throughput, memory), fleet, controllers, density, streams and services benchmarks, JSON results in ./bench-results/
#   make bench-ota   `outpost bench ota`, its delta measured on two builds of outpost-edge a patch release apart, JSON in ./bench-results/
#   make cross   linux/arm64 and linux/arm (ARMv7) binaries in bin/<os>-<arch>/
#   make test-helm     Helm 4's SDK installs, upgrades, rolls back and uninstalls a chart on an in-process hub (a module of its own)
#   make conformance   upstream's sig-api-machinery [Conformance] e2e specs against outpost up (as root; not in make test), results in ./bench-results/conformance/
#   make clean

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export PATH := /usr/local/go/bin:$(PATH)

GO ?= go
PKG := github.com/outpost-mesh/outpost

VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo dev)
# The commit's date, not the time of the build, so builds are reproducible.
BUILD_DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo 1970-01-01T00:00:00Z)

LDFLAGS := -X $(PKG)/internal/version.Version=$(VERSION) \
	-X $(PKG)/internal/version.Commit=$(COMMIT) \
	-X $(PKG)/internal/version.BuildDate=$(BUILD_DATE)
# grpcnotrace keeps gRPC (the containerd client) from importing
# golang.org/x/net/trace, whose html/template makes the linker keep every
# exported method of every type in the binary (MB of flash and RSS on each
# gateway). Builds, vet and tests use the same tags, and so must tests that
# build the binaries themselves.
GOTAGS := grpcnotrace
BUILDFLAGS := -trimpath -buildvcs=false -tags '$(GOTAGS)'
CMDS := ./cmd/outpost ./cmd/outpost-edge

DATA_DIR ?= ./.outpost
BENCH_DIR ?= ./bench-results
# Arguments of `outpost bench store`; the result file goes under BENCH_DIR.
BENCH_STORE_ARGS ?= --out $(BENCH_DIR)/store.json

# The containerd 2.x that `make test-containerd2` builds and tests on
# (Debian's, which `make test` uses, is 1.6).
CONTAINERD2_VERSION ?= v2.4.2
CONTAINERD2_DIR := $(CURDIR)/bin/containerd-$(CONTAINERD2_VERSION)

.PHONY: all deps build run test test-containerd2 vet fmt-check bench cross clean

all: build

deps:
	@bash hack/deps.sh

# Static (CGO_ENABLED=0), as the binaries the fleet runs (see cross): no
# libc mapped, 1.3 MB less resident on every node.
build: deps
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o bin/ $(CMDS)

run: build
	bin/outpost up --dir $(DATA_DIR) --nodes 2

test: deps vet fmt-check
	$(GO) test -tags '$(GOTAGS)' -race -count=1 -timeout 25m ./...

# containerd and its runc shim, static, without the snapshotters the
# agent does not use; the agent runs the shims beside its containerd.
test-containerd2: deps
	GOBIN=$(CONTAINERD2_DIR) CGO_ENABLED=0 $(GO) install -tags 'no_btrfs no_devmapper no_zfs' \
		github.com/containerd/containerd/v2/cmd/containerd@$(CONTAINERD2_VERSION) \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$(CONTAINERD2_VERSION)
	OUTPOST_TEST_CONTAINERD=$(CONTAINERD2_DIR)/containerd $(GO) test -tags '$(GOTAGS)' -race -count=1 -timeout 25m \
		./edge/runtime/containerd/ ./test/podint/

vet:
	$(GO) vet -tags '$(GOTAGS)' ./...

fmt-check:
	@unformatted=$$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -print0 | xargs -0 -r gofmt -l); \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt needed on these files (run gofmt -w on them):"; \
		echo "$$unformatted"; \
		exit 1; \
	fi

bench: build
	mkdir -p $(BENCH_DIR)
	bin/outpost bench store $(BENCH_STORE_ARGS)
	bin/outpost bench api --out $(BENCH_DIR)/api.json
	bin/outpost bench api memory --out $(BENCH_DIR)/api-memory.json
	bin/outpost bench api apply --out $(BENCH_DIR)/api-apply.json
	bin/outpost bench api crd --out $(BENCH_DIR)/api-crd.json
	bin/outpost bench fleet --out $(BENCH_DIR)/fleet.json
	bin/outpost bench controllers --out $(BENCH_DIR)/controllers.json
	bin/outpost bench density --out $(BENCH_DIR)/density.json
	bin/outpost bench streams --out $(BENCH_DIR)/streams.json
	bin/outpost bench services --out $(BENCH_DIR)/services.json
	bin/outpost bench mesh --out $(BENCH_DIR)/mesh.json

# `outpost bench ota` with its delta measured on a rebuilt agent: two builds
# of outpost-edge as `make cross` makes them for OTA_GOARCH (static,
# stripped) that differ as a patch release does, in the version and the
# commit linked in. The fleet takes the 5 MB pseudo-random artifact; a few
# nodes then take the first build and the second, as a delta. With
# OTA_BASE_REV (a git revision, e.g. HEAD~3) the first build is of that
# revision's tree, so that the rebuild carries its code changes too.
OTA_BASE_VERSION ?= 2.1.0
OTA_VERSION ?= 2.1.1
OTA_BASE_REV ?=
OTA_BASE_COMMIT ?= $(shell git rev-parse $(or $(OTA_BASE_REV),HEAD~1) 2>/dev/null || echo dev-base)
OTA_BASE_DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ $(or $(OTA_BASE_REV),HEAD~1) 2>/dev/null || echo 1970-01-01T00:00:00Z)
OTA_GOARCH ?= arm64
OTA_STRIP ?= -s -w
OTA_AGENT_DIR := $(BENCH_DIR)/ota-agent
BENCH_OTA_ARGS ?=
ota_agent_ldflags = $(OTA_STRIP) -X $(PKG)/internal/version.Version=$(1) \
	-X $(PKG)/internal/version.Commit=$(2) -X $(PKG)/internal/version.BuildDate=$(3)

.PHONY: bench-ota
bench-ota: build
	rm -rf $(OTA_AGENT_DIR) && mkdir -p $(OTA_AGENT_DIR)
	$(if $(OTA_BASE_REV),mkdir $(OTA_AGENT_DIR)/src && git archive $(OTA_BASE_REV) | tar -x -C $(OTA_AGENT_DIR)/src)
	cd $(if $(OTA_BASE_REV),$(OTA_AGENT_DIR)/src,.) && \
		CGO_ENABLED=0 GOOS=linux GOARCH=$(OTA_GOARCH) GOARM=7 $(GO) build $(BUILDFLAGS) \
		-ldflags '$(call ota_agent_ldflags,$(OTA_BASE_VERSION),$(OTA_BASE_COMMIT),$(OTA_BASE_DATE))' \
		-o $(abspath $(OTA_AGENT_DIR))/outpost-edge-$(OTA_BASE_VERSION) ./cmd/outpost-edge
	rm -rf $(OTA_AGENT_DIR)/src
	CGO_ENABLED=0 GOOS=linux GOARCH=$(OTA_GOARCH) GOARM=7 $(GO) build $(BUILDFLAGS) \
		-ldflags '$(call ota_agent_ldflags,$(OTA_VERSION),$(COMMIT),$(BUILD_DATE))' \
		-o $(OTA_AGENT_DIR)/outpost-edge-$(OTA_VERSION) ./cmd/outpost-edge
	bin/outpost bench ota --base-artifact $(OTA_AGENT_DIR)/outpost-edge-$(OTA_BASE_VERSION) \
		--artifact $(OTA_AGENT_DIR)/outpost-edge-$(OTA_VERSION) --out $(BENCH_DIR)/ota.json $(BENCH_OTA_ARGS)

# Upstream's e2e suite, from k8s.io/kubernetes at the release of the k8s.io
# modules above, built in test/conformance (a module of its own, so that
# go test ./... never builds it) and run against `outpost up` in namespaces
# of its own; see test/conformance/README.md.
# Helm 4's SDK and its dependencies (controller-runtime, kustomize, oras,
# ...) stay out of the main module: test/helm is a module of its own that
# only this target builds, so that they reach neither binary nor make test.
.PHONY: test-helm
test-helm: deps
	cd test/helm && $(GO) test -tags '$(GOTAGS)' -race -count=1 -timeout 15m ./...

.PHONY: conformance
conformance:
	CONFORMANCE_OUT=$(abspath $(BENCH_DIR))/conformance bash test/conformance/run.sh

# Edge gateways are ARM; the binaries are static (CGO_ENABLED=0) and
# stripped.
cross: deps
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build $(BUILDFLAGS) -ldflags '-s -w $(LDFLAGS)' -o bin/linux-arm64/ $(CMDS)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) build $(BUILDFLAGS) -ldflags '-s -w $(LDFLAGS)' -o bin/linux-arm/ $(CMDS)

clean:
	rm -rf bin/ $(BENCH_DIR)
