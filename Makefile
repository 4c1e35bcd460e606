# Make targets for development; `make` alone lists them. The scripts they call (scripts/) hold
# the logic, so each also runs without make. Recipes need bash.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO ?= go
# Where `make demo` sends its deliveries (the address scripts/run-local serves).
INGEST_URL ?= http://127.0.0.1:8080
# Extra arguments for `make test`, e.g. make test ARGS='-run TestReplay ./internal/worker'.
ARGS ?=
# How long each target of `make fuzz` runs (go test -fuzztime), e.g. make fuzz FUZZTIME=10m.
FUZZTIME ?= 60s
# What make build stamps into the binaries (internal/version): Go stamps the revision itself only
# in a checkout whose .git is a directory and without -buildvcs=false.
VERSION_PKG := github.com/inboxhq/inbox/internal/version
VERSION_LDFLAGS ?= -X $(VERSION_PKG).version=$(shell git describe --tags --always --dirty 2>/dev/null) \
	-X $(VERSION_PKG).revision=$(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
# Which drills `make drills` runs (a go test -run pattern), e.g. make drills DRILL=DrillWorkerKill.
DRILL ?= Drill

.PHONY: help tools run stop test screenshots drills fuzz mutate bench-pipeline bench-worker-ab bench-budget bench-scale build migrate demo db env db-stop db-destroy lint bench generate clean

help: ## list the targets
	@echo 'usage: make TARGET'
	@echo
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

run: ## run worker and ingest locally with the example sources (scripts/run-local); one "ready" line when both are up
	scripts/run-local

stop: ## stop a make run running in the background or another terminal (SIGTERM; waits for both to drain)
	scripts/run-local stop

tools: ## install what the tests need beyond Go and PostgreSQL: promtool, stripe-mock, chromium, kustomize, kubeconform (scripts/ensure-tools; root for apt-get)
	scripts/ensure-tools

test: ## gofmt, go vet and every test against a real PostgreSQL (scripts/test; ARGS=... for go test)
	scripts/test $(ARGS)

screenshots: ## retake the console's screenshots in docs/console (the browser test, headless Chromium)
	CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console scripts/test -run TestConsoleInABrowser ./e2e

drills: ## failure drills at full size, each on its own throwaway PostgreSQL (process logs in .tmp/drills)
	@mkdir -p .tmp/drills
	INBOX_DRILL_SCALE=full INBOX_DRILL_LOGS=$(CURDIR)/.tmp/drills $(GO) test -count=1 -timeout 30m -v -run '$(DRILL)' ./e2e

fuzz: ## run each fuzz target for FUZZTIME against the dev PostgreSQL (their seed corpora run in make test)
	@url=$$(scripts/dev-db ensure) || exit 1; \
	for t in './internal/provider FuzzVerify' './internal/envelope FuzzJSONBSafe' './internal/ingest FuzzIngest' './internal/pg FuzzRedact'; do \
		set -- $$t; echo "== $$2 ($$1)"; \
		TEST_DATABASE_URL="$$url" $(GO) test -run '^$$' -fuzz "^$$2$$" -fuzztime $(FUZZTIME) "$$1" || exit 1; \
	done

mutate: ## the mutation run: each bug of scripts/mutations.txt in a temporary copy, its tests must fail (ARGS=...)
	scripts/mutate $(ARGS)

bench-scale: ## the storage at size: a fresh database against one of SCALE_ROWS envelopes (default 10 M; says the disk it needs), ratios (scripts/bench-scale)
	scripts/bench-scale

build: ## build bin/ingest, bin/worker and bin/sendhook, stamped with the git revision (--version, inbox_build_info)
	$(GO) build -ldflags '$(VERSION_LDFLAGS)' -o bin/ ./cmd/...

migrate: build ## apply the migrations to DATABASE_URL (default: database inbox on the dev server)
	@url="$${DATABASE_URL:-}"; \
	if [[ -z "$$url" ]]; then url=$$(scripts/dev-db db inbox) || exit 1; fi; \
	DATABASE_URL="$$url" bin/worker migrate

demo: ## send signed sample deliveries, each twice, to INGEST_URL (see make run)
	scripts/with-example-env $(GO) run ./cmd/sendhook demo --url '$(INGEST_URL)'

db: ## print the URL of the dev database make run uses (inbox), starting PostgreSQL if needed
	@scripts/dev-db db inbox

env: ## for a fresh shell: eval "$$(make -s env)" exports the DATABASE_URL make run uses
	@url=$$(scripts/dev-db db inbox) || exit 1; printf 'export DATABASE_URL=%q\n' "$$url"

db-stop: ## stop the throwaway PostgreSQL cluster in .tmp/pg (keeps its data)
	scripts/dev-db stop

db-destroy: ## stop the throwaway cluster and delete .tmp/pg
	scripts/dev-db destroy

lint: ## gofmt -l, go vet, and shellcheck on the scripts when it is installed
	@out=$$(find . \( -path ./.git -o -path ./.tmp -o -path ./bin \) -prune -o -name '*.go' -print0 | xargs -0 -r gofmt -l); \
	if [[ -n "$$out" ]]; then echo "needs gofmt -w:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if command -v shellcheck >/dev/null; then shellcheck -x -S warning $$(grep -l '^#!/usr/bin/env bash' scripts/* 2>/dev/null) scripts/lib/*.sh .ci/run; else echo 'shellcheck not installed: skipped'; fi

bench-pipeline: ## ingest, worker and steady-state throughput against their baselines, in one run (docs/benchmarks.md)
	scripts/bench-pipeline

bench-worker-ab: ## interleaved worker drains with CPU per envelope, e.g. make bench-worker-ab ARGS='a=bin b=bin:GOGC=400 ceiling'
	scripts/bench-worker-ab $(ARGS)

bench-budget: ## the end-to-end CPU and WAL budget per envelope and the highest sustained rate, builds interleaved, e.g. make bench-budget ARGS='old=.tmp/old/bin new=.tmp/bench/bin'
	scripts/bench-budget $(ARGS)

bench: ## run the benchmarks (no tests) against the dev PostgreSQL
	@url=$$(scripts/dev-db ensure) || exit 1; \
	echo "TEST_DATABASE_URL=$$url $(GO) test -run '^$$' -bench . -benchtime 2s ./..."; \
	TEST_DATABASE_URL="$$url" $(GO) test -run '^$$' -bench . -benchtime 2s ./...

generate: ## go generate ./... (regenerates River's migrations from the River module)
	$(GO) generate ./...

clean: ## remove bin/ (the database stays: see db-destroy)
	rm -rf bin
