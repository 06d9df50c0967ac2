# The README's commands. Tests need PostgreSQL server binaries (initdb,
# pg_ctl) and nothing else: they start their own throwaway cluster.
.PHONY: test demo race soak bench ci ha release
# The library, the CLI (cmd/pglease), the scheduler (pgleasecron) and the
# adapters (pgleasegoose, pgleasegocron, pgleaseriver) are modules of their
# own (go.work ties them together), hence a pattern each.
PKGS = ./... ./cmd/pglease/... ./pgleasecron/... ./pgleasegoose/... ./pgleasegocron/... ./pgleaseriver/...
test:
	go test $(PKGS)
race:
	go test -race -shuffle=on $(PKGS)
demo:
	go run ./cmd/pglease demo
# The soaks: the fault suite (10,000 critical sections) and the
# combination test (PGLEASE_COMBO_SEEDS random sequences, default 40, of
# 60 steps); then porcupine (lincheck) checks every history they wrote,
# kept in $(HISTDIR) with a view of any that fails.
HISTDIR ?= /tmp/pglease-histories
soak:
	@rm -rf $(HISTDIR) && mkdir -p $(HISTDIR); s=0; \
	  PGLEASE_SOAK=1 PGLEASE_HISTORY_DIR=$(HISTDIR) go test -run TestSoak -timeout 30m -v ./internal/chaos/ || s=1; \
	  PGLEASE_SOAK=1 PGLEASE_HISTORY_DIR=$(HISTDIR) go test -run TestCombination -timeout 150m -v ./internal/combination/ || s=1; \
	  (cd lincheck && go run ./cmd/lincheck -html $(HISTDIR) $(HISTDIR)) || s=1; exit $$s
# The high-availability suite against a real Patroni cluster (docs/HA.md):
# every fault, synchronous and asynchronous replication; about 20 minutes.
# Its last line reads "ha: <scenarios> scenarios, <failovers> failovers,
# <violations> violations"; the whole log is in $(HALOG).
HALOG ?= /tmp/pglease-ha.log
ha:
	@command -v patroni >/dev/null && command -v etcd >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patroni etcd-server >/dev/null; } || \
	  { echo "make ha needs Debian's patroni and etcd-server packages: apt-get install patroni etcd-server"; exit 1; }
	@PGLEASE_HA=1 go test -p 1 -run '^(TestPartitionAndRejoin|TestPatroni)$$' -count=1 -timeout 90m -v ./internal/patroni/ ./internal/chaos/ > $(HALOG) 2>&1; s=$$?; \
	  grep -E '^(ha:|--- FAIL|FAIL)' $(HALOG); [ $$s = 0 ] || echo "make ha failed: see $(HALOG)"; exit $$s
bench:
	cd bench && ./run.sh
ci:
	bash .ci/run
# Release binaries of the CLI, for those who install without a Go
# toolchain: static (CGO_ENABLED=0) for Linux and macOS on amd64 and arm64,
# in $(DIST) with a SHA256SUMS file. Reproducible: the same commit built
# with the same Go release gives the same bytes on any machine and in any
# directory (-trimpath, no VCS stamp or build id); 'pglease version' names
# $(VERSION) and $(COMMIT), stamped with -X.
VERSION ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo v0.0.0-$$(git rev-parse --short=12 HEAD)$$(git diff --quiet HEAD || echo -dirty))
COMMIT ?= $(shell git rev-parse HEAD)
DIST ?= dist
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
STAMP = github.com/pglease/pglease/cmd/pglease/internal/cli
release:
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; out=pglease-$(VERSION)-$$os-$$arch; \
	  echo "building $$out"; \
	  (cd cmd/pglease && CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -buildvcs=false \
	    -ldflags "-s -w -buildid= -X $(STAMP).stampedVersion=$(VERSION) -X $(STAMP).stampedCommit=$(COMMIT)" \
	    -o "$(abspath $(DIST))/$$out" .); \
	done
	@cd $(DIST) && sha256sum pglease-* > SHA256SUMS && cat SHA256SUMS
