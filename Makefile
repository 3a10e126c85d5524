# envd: the two commands are `make run` and `make test` (see README.md).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
MAKEFLAGS += --warn-undefined-variables --no-builtin-rules
.DEFAULT_GOAL := help

export PATH := /usr/local/go/bin:$(PATH)
BUF := go tool -modfile=tools/go.mod buf
STATICCHECK := go tool -modfile=tools/go.mod staticcheck
# The protos as of the last release: make lint's buf breaking compares the
# protos against it; make proto-baseline records it anew.
PROTO_BASELINE := proto/baseline.binpb
BIN := bin
# Where `make run` listens; `make run HOST=0.0.0.0` to expose it.
HOST ?= 127.0.0.1
ENVD_FLAGS ?=
# Off on a machine of your own: forwarding would expose its loopback-only
# servers on its external addresses (`make run FORWARD_PORTS=true` in a sandbox).
FORWARD_PORTS ?= false

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## install what envd and its tests need (idempotent)
	scripts/install-deps.sh

# The commit the binaries report (envd -commit, the version's build
# metadata): 12 hex digits, -dirty when the tree has changes; empty outside a
# checkout (Go's own VCS stamp, or "unknown", then).
COMMIT ?= $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { [ -z "$$(git status --porcelain 2>/dev/null)" ] || c=$$c-dirty; echo $$c; })
LDFLAGS := -s -w -X github.com/envd-dev/envd/buildinfo.commit=$(COMMIT)

.PHONY: build
build: ## build bin/envd, static
	CGO_ENABLED=0 go build -buildvcs=auto -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/envd ./cmd/envd

# What running envd needs, without what only the tests use (the SDKs' npm
# tree, test tools): make test installs those.
.PHONY: deps-run
deps-run:
	ENVD_SKIP_COMPAT=1 scripts/install-deps.sh

.PHONY: run
run: deps-run build ## install what running envd needs, then run envd with Jupyter on localhost
	$(BIN)/envd -host $(HOST) -forward-ports=$(FORWARD_PORTS) -mmds-url off $(ENVD_FLAGS)

.PHONY: test
# The tests import the whole data stack the image ships (test/compat/datastack.test.mjs).
test: export ENVD_INSTALL_FULL := 1
test: deps checkgenerate lint test-go fuzz-smoke test-compat ## every test: generated code, lint, Go with -race, each fuzz target briefly, the SDK compatibility suite

.PHONY: test-go
test-go: ## Go tests with the race detector
	go test -race -shuffle=on -count=1 -timeout 40m ./...

.PHONY: stress
stress: ## the Go suite STRESS_N times (3) beside two CPU burners; prints each failure
	scripts/stress.sh

# How long `make fuzz` runs each fuzz target (go test -fuzztime).
FUZZTIME ?= 1m

.PHONY: fuzz
fuzz: ## every Go fuzz target in turn for FUZZTIME (1m; make fuzz FUZZTIME=10m); a failing input lands in its package's testdata/fuzz
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

.PHONY: fuzz-smoke
fuzz-smoke: ## every Go fuzz target for 3s: a short run past the seed corpora
	FUZZTIME=3s scripts/fuzz.sh

.PHONY: test-compat
test-compat: build ## the unmodified npm SDKs against a real envd
	cd test/compat && ENVD_BIN=$(CURDIR)/$(BIN)/envd npm test

.PHONY: lint
lint: ## gofmt, go vet, staticcheck, the package rules (internal/archtest), buf lint, buf format, buf breaking against PROTO_BASELINE
	@# The work tree's Go files: tracked and not yet tracked, less those removed.
	@out=$$(git ls-files -co --exclude-standard '*.go' | grep -v '^gen/' | while read -r f; do [ ! -e "$$f" ] || echo "$$f"; done | xargs -r gofmt -l); if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi
	go vet ./...
	$(STATICCHECK) ./...
	go test -count=1 ./internal/archtest/
	$(BUF) lint
	$(BUF) format -d --exit-code
	$(BUF) breaking --against $(PROTO_BASELINE)

# Run at a release, and commit the result: from then on make lint's buf
# breaking holds the protos to what that release speaks. Source info is left
# out: buf breaking compares types and fields, not comments.
.PHONY: proto-baseline
proto-baseline: ## at a release: record the protos as PROTO_BASELINE, what make lint's buf breaking compares against
	$(BUF) build --exclude-source-info -o $(PROTO_BASELINE)

.PHONY: generate
generate: ## regenerate gen/ from proto/
	$(BUF) generate
	go mod tidy

.PHONY: checkgenerate
checkgenerate: generate ## fail if regenerating changes anything
	@if [ -n "$$(git status --porcelain -- gen go.mod go.sum)" ]; then git status --porcelain -- gen go.mod go.sum; git diff --stat -- gen go.mod go.sum; echo "generated code is stale: run make generate and commit"; exit 1; fi

.PHONY: bench
bench: deps build envctl ## benchmarks: each measured path against an in-run baseline, then a table of ratios, goals, MET or MISSED
	bench/run.sh

# How long `make soak` runs its workload (a Go duration: 90s, 10m, 1h).
SOAK_DURATION ?= 10m

.PHONY: soak
soak: deps build envctl ## a mixed SDK and envctl workload on a real envd for SOAK_DURATION (10m); fails on a failed or stalled op or on growth (soak/README.md)
	SOAK_DURATION=$(SOAK_DURATION) node soak/soak.mjs

.PHONY: envctl
envctl: ## build bin/envctl, static
	CGO_ENABLED=0 go build -buildvcs=auto -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/envctl ./cmd/envctl

# Where `make install` puts envd and envctl.
PREFIX ?= /usr/local

.PHONY: install
install: build envctl ## install envd and envctl in PREFIX/bin (default /usr/local/bin)
	install -D -m 0755 $(BIN)/envd $(DESTDIR)$(PREFIX)/bin/envd
	install -D -m 0755 $(BIN)/envctl $(DESTDIR)$(PREFIX)/bin/envctl

.PHONY: clean
clean: ## remove what the build made (bin/)
	rm -rf $(BIN)
