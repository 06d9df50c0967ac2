# The README's commands. Tests need PostgreSQL server binaries (initdb,
# pg_ctl) and nothing else: they start their own throwaway cluster.
.PHONY: test demo race soak bench ci ha
# The library, the CLI (cmd/pglease) and the scheduler (pgleasecron) are
# modules of their own (go.work ties them together), hence three patterns.
PKGS = ./... ./cmd/pglease/... ./pgleasecron/...
test:
	go test $(PKGS)
race:
	go test -race -shuffle=on $(PKGS)
demo:
	go run ./cmd/pglease demo
soak:
	PGLEASE_SOAK=1 go test -run TestSoak -timeout 30m -v ./internal/chaos/
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
