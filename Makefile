# The README's commands. Tests need PostgreSQL server binaries (initdb,
# pg_ctl) and nothing else: they start their own throwaway cluster.
.PHONY: test demo race soak bench ci ha
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
