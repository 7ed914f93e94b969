# Lockplane. `make dev` runs the embedded default; `make up` stands a whole
# region up on local test hosts; `make test` runs the tests.
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
TOOLS := tools/build

.PHONY: hygiene all build dev test test-short vet proto proto-check dashboards dashboards-check tools minio spire clickhouse audit-deps infra-tools up down dr-drill dr-drills bench-core bench-scale bench-audit bench-fsync gate gate-short images clean
PULUMI_VERSION := v3.274.1

all: build

build:
	$(GO) build -o $(BIN)/ ./services/cmd/... ./nodes/cmd/... ./test/hosts/cmd/...

# The embedded default: 3-member etcd, the arbiter and a dev trust domain.
dev: build
	$(BIN)/lockplane dev

# Every test runs against real embedded etcd clusters and real mTLS.
# Tests also build the negative controls: rules broken on purpose, which
# the safety tests must catch. No shipped binary is built with this tag.
TEST_TAGS := lockplane_broken_rules

test: vet minio spire build infra-tools
	$(GO) test -tags $(TEST_TAGS) -count=1 -timeout 25m ./...
	cd services/client && $(GO) test -count=1 ./...
	cd images && $(GO) test -count=1 ./...

test-short:
	$(GO) test -tags $(TEST_TAGS) -count=1 -short ./...
	cd services/client && $(GO) test -count=1 -short ./...

vet:
	$(GO) vet ./...
	$(GO) vet -tags $(TEST_TAGS) ./services/internal/arbiter/...
	cd services/client && $(GO) vet ./...
	cd images && $(GO) vet ./...

# Tools are built from the separate tools module so go.mod stays lean.
$(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc: $(TOOLS)/go.mod
	cd $(TOOLS) && $(GO) build -o $(BIN)/ github.com/bufbuild/buf/cmd/buf \
		google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc

# MinIO, the real S3 server the fence tests and the pause test run against
# (about 2.5 minutes on 2 cores the first time).
minio: $(BIN)/minio
$(BIN)/minio: $(TOOLS)/go.mod
	cd $(TOOLS) && $(GO) build -o $(BIN)/minio github.com/minio/minio

# SPIRE's server and agent (v1.13.3), built from their own tools module:
# the identity tests rotate SVIDs through them. Both in one build, which
# shares their dependencies (about 10 minutes on 2 cores the first time),
# without debug information (a third smaller, quicker to link); go build
# fetches only the modules they need.
spire: $(BIN)/spire-server $(BIN)/spire-agent
$(BIN)/spire-server $(BIN)/spire-agent &: tools/spire/go.mod tools/spire/go.sum
	cd tools/spire && $(GO) build -ldflags "-s -w" -o $(BIN)/ github.com/spiffe/spire/cmd/spire-server github.com/spiffe/spire/cmd/spire-agent

# ClickHouse, the audit store the audit tests run against: Debian's 18.16,
# run by the tests on loopback with their own config (never the service).
# A no-op where it is installed.
clickhouse:
	@test -x /usr/sbin/clickhouse-server || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clickhouse-server; }

# What audit adds to `make dev`: the store (ClickHouse) and the archive
# (MinIO). `lockplane dev` names this target when either is missing.
audit-deps: clickhouse minio

# The Pulumi CLI, built from its own tools module (the Go language host is
# not served, so the program runs inline through the Automation API), and
# the provider plugin for hosts. The first build takes about 5 minutes.
infra-tools: $(BIN)/pulumi build
$(BIN)/pulumi: tools/pulumi/go.mod
	cd tools/pulumi && $(GO) build -ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$(PULUMI_VERSION)" \
		-o $(BIN)/pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi

# A whole region on this machine: 16 test hosts (network namespaces with
# sshd: the region's 15 and the snapshot store's), `lockplane up --stack local`, then a lock through the deployed
# arbiter. Needs root. `make down` removes it all.
up: infra-tools minio spire clickhouse
	@test -f .lockplane/hosts/hosts.json || $(BIN)/testhosts up --stack stacks/Pulumi.local.yaml --stack stacks/Pulumi.local-snapshots.yaml --dir .lockplane/hosts
	$(BIN)/lockplane up --stack local-snapshots
	$(BIN)/lockplane up --stack local
	@echo; echo "== a lock through the deployed arbiter"
	$(BIN)/lockctl --profile .lockplane/local/profile.json run demo/orders/42 --class demo -- sh -c 'echo "held demo/orders/42 with token $$LOCKPLANE_TOKEN"'
	@echo; echo "next: bin/lockctl --profile .lockplane/local/profile.json status | inspect KEY | acquire KEY"
	@echo "      bin/lockplane snapshot list --stack local; bin/lockplane preview --stack local; make down"

# The DR drill (docs/dr.md), which CI runs inside make test: the region and
# its snapshot store up, snapshots, the region destroyed, the DR stack up from the
# snapshot store (sealed), two operators unseal, a token above every one before,
# the RTO printed, everything destroyed. 25 test hosts (region, snapshot store, DR).
# Asked for by name, it fails rather than skips when something it needs is
# missing (CI=1: the tests' "fail loudly" switch).
dr-drill: build infra-tools minio spire clickhouse
	CI=1 $(GO) test ./test/e2e/ -run TestUpLockNoChangesDestroy -count=1 -v -timeout 45m

# The drill N times in a row (default 10), each run's result and RTO in
# one summary at the end: what a change to up or DR is proven by.
DRILLS ?= 10
dr-drills: build infra-tools minio spire clickhouse
	@pass=0; for i in $$(seq $(DRILLS)); do \
	  echo "== drill $$i of $(DRILLS)"; \
	  mkdir -p .lockplane; if CI=1 $(GO) test ./test/e2e/ -run TestUpLockNoChangesDestroy -count=1 -v -timeout 45m > .lockplane/drill-$$i.log 2>&1; \
	  then pass=$$((pass+1)); r=pass; else r=FAIL; fi; \
	  echo "drill $$i: $$r; $$(grep -ho 'RTO [0-9a-z.]*' .lockplane/drill-$$i.log | tr '\n' ' ')(log .lockplane/drill-$$i.log)"; \
	done; echo "== $$pass of $(DRILLS) drills passed"; test $$pass -eq $(DRILLS)

down:
	-$(BIN)/lockplane destroy --stack local
	-$(BIN)/lockplane destroy --stack local-snapshots
	$(BIN)/testhosts down --dir .lockplane/hosts

# Lint and regenerate services/client/api from services/proto.
proto: tools
	$(BIN)/buf lint
	$(BIN)/buf generate

# Fails when the committed generated code is not what `make proto` makes.
# The Grafana dashboards are generated (tools/dashboards, its own module)
# into infra/monitoring/dashboards; dashboards-check fails on a stale file.
dashboards:
	cd tools/dashboards && $(GO) run . -out ../../infra/monitoring/dashboards

dashboards-check:
	cd tools/dashboards && $(GO) run . -check -out ../../infra/monitoring/dashboards

proto-check: proto
	@# The contract only grows: wire and JSON compatible with the previous
	@# commit (a shallow clone without one skips the comparison, saying so).
	if git rev-parse -q --verify HEAD~1 >/dev/null; then \
		$(BIN)/buf breaking --against '.git#ref=HEAD~1'; \
	elif [ -n "$$CI" ]; then echo "proto-check: CI needs the previous commit for buf breaking: clone with history"; exit 1; \
	else echo "proto-check: no previous commit in this clone; buf breaking skipped"; fi
	git diff --exit-code -- services/client/api || { echo "services/client/api is stale: run make proto and commit"; exit 1; }
	test -z "$$(git status --porcelain -- services/client/api)" || { echo "untracked generated files: run make proto and commit"; exit 1; }

# This package's fsync benchmark beside fio's etcd recipe on one directory.
bench-fsync:
	$(GO) test -run '^$$' -bench AgainstFio -benchtime 7x ./services/fsync

# The audit tailer on the embedded default with a real ClickHouse: catch-up
# throughput and live lag (make clickhouse first).
bench-audit:
	$(GO) run ./benchmarks/audit $(BENCH_ARGS)

# Raw etcd Txn vs Lockplane vs concurrency.Mutex on one embedded cluster,
# then a hot key with 8 contenders (Lockplane vs concurrency.Mutex handoffs).
bench-core: build
	$(GO) run ./benchmarks/core -hot 8 -shards 2 $(BENCH_ARGS)

# Sessions and holds kept renewing on one 3-member entity shard by separate
# client processes: keepalives reaching etcd, false expiries, memory per
# session and hold, db size, fresh grants under that load, CPU. The default
# is a smoke of about two minutes that prints and asserts nothing;
# FULL=1 is the issue's 40,000 sessions and 250,000 holds for 10 minutes.
# The binary is built, not `go run`, because it re-executes itself as the
# client workers. PROCESSES=1 runs etcd and the arbiter as processes of
# their own, built from this tree, so RSS and CPU are the arbiter's alone.
bench-scale:
	$(GO) build -o .lockplane/bench-scale ./benchmarks/scale
	$(if $(PROCESSES),$(GO) build -o .lockplane/etcd ./services/cmd/etcd)
	$(if $(PROCESSES),$(GO) build -o .lockplane/arbiter ./services/cmd/arbiter)
	.lockplane/bench-scale $(if $(FULL),-full) $(if $(PROCESSES),-processes -etcd .lockplane/etcd -arbiter .lockplane/arbiter) $(BENCH_ARGS)

# The release gate (ADR-23): fault-injected histories of etcd, arbiter and
# client processes, checked by Porcupine and the grant checks. gate-short
# is what CI runs: one history of every fault kind (-each 1), the
# adversarial ones included (steal, steal-shard, two-tier, live-advance,
# nospace), about 5 minutes on 2 cores. It needs bin/etcd and bin/arbiter
# (make build) and PostgreSQL 15 (resourcetest.NewPostgres).
COUNT ?= 200
SEED  ?= 1
$(BIN)/gate: build
	$(GO) build -o $(BIN)/gate ./test/gate/cmd/gate

gate-short: $(BIN)/gate
	$(BIN)/gate -each 1 -seed $(SEED) -etcd $(BIN)/etcd -arbiter $(BIN)/arbiter -artifacts artifacts/gate-short

gate: $(BIN)/gate
	$(BIN)/gate -count $(COUNT) -seed $(SEED) -etcd $(BIN)/etcd -arbiter $(BIN)/arbiter -artifacts artifacts/gate

# Fails on any tracked compiled executable: build outputs are never
# committed; a fresh machine builds them. One is told by its first bytes:
# ELF; Mach-O, either byte order, 32 or 64 bit, universal (cafebabe,
# cafebabf), where cafebabe also starts Java .class files, which are build
# outputs too; and PE, whose "MZ" a text file may start with, so only with
# "PE\0\0" at the little-endian offset at 0x3c (e_lfanew).
# test/hygiene checks this recipe, and that every main package's build
# output is in .gitignore.
hygiene:
	@bad=$$(git ls-files -z | xargs -0 -r sh -c 'for f; do [ -f "$$f" ] || continue; \
		case "$$(head -c4 "$$f" | od -An -tx1 | tr -d " \n")" in \
		7f454c46|cffaedfe|cefaedfe|feedfacf|feedface|cafebabe|cafebabf) echo "$$f";; \
		4d5a*) off=$$(set -- $$(od -An -tu1 -j60 -N4 "$$f"); [ $$# -eq 4 ] && echo $$(($$1 + 256*$$2 + 65536*$$3 + 16777216*$$4))); \
			[ -n "$$off" ] && [ "$$(od -An -tx1 -j"$$off" -N4 "$$f" | tr -d " \n")" = 50450000 ] && echo "$$f";; \
		esac; done' sh); \
	if [ -n "$$bad" ]; then echo "tracked executables (remove them; build outputs are ignored):"; echo "$$bad"; exit 1; fi

# OCI image layouts of the arbiter, lockplane-node and etcd, FROM SCRATCH
# with static binaries, in .lockplane/images/NAME, built by the images
# module without a container engine. Prints each name and digest; the same
# source gives the same digests (images/README.md). IMAGES_FLAGS=-json for
# JSON lines.
images:
	cd images && $(GO) run ./cmd/lockplane-images -root $(CURDIR) -revision $$(git -C $(CURDIR) rev-parse HEAD) $(IMAGES_FLAGS)

clean:
	rm -rf $(BIN) .lockplane
