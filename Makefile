# The README's commands. Tests need PostgreSQL server binaries (initdb,
# pg_ctl) and nothing else: they start their own throwaway cluster.
.PHONY: test demo race soak bench ci
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
bench:
	cd bench && ./run.sh
ci:
	bash .ci/run
