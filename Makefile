# The README's commands. Tests need PostgreSQL server binaries (initdb,
# pg_ctl) and nothing else: they start their own throwaway cluster.
.PHONY: test demo race soak bench ci
test:
	go test ./...
race:
	go test -race -shuffle=on ./...
demo:
	go run ./cmd/pglease demo
soak:
	PGLEASE_SOAK=1 go test -run TestSoak -timeout 30m -v ./internal/chaos/
bench:
	cd bench && ./run.sh
ci:
	bash .ci/run
