package cli

const mainHelp = `pglease — leases (distributed locks) in PostgreSQL

Usage:
  pglease run NAME [flags] -- COMMAND [ARG...]   run COMMAND while holding lease NAME
  pglease ls [--json]                            list leases
  pglease status NAME                            exit 0 if NAME is held, 3 if free
  pglease release NAME --force                   take a lease from its holder
  pglease migrate                                create the lease table
  pglease schema                                 print the table's DDL
  pglease cleanup                                delete expired rows
  pglease demo                                   watch workers fail over on a throwaway PostgreSQL
  pglease version
  pglease completion bash|zsh

Connection: --dsn, else $PGLEASE_DSN, else $DATABASE_URL, else the libpq
PG* variables (PGHOST, PGUSER, PGPASSWORD, .pgpass, PGSERVICE...).

Examples:
  pglease demo
  pglease run nightly-report -- ./report.sh
  pglease run --wait --timeout 10m db-migrate -- ./migrate up
  pglease ls

Run 'pglease COMMAND --help' for the flags of a command.
Exit statuses: 0 ok, 1 error, 2 usage, 3 free, 75 held by another,
76 lease lost, 126/127 command not executable/not found, else the command's.
`

var helpTexts = map[string]string{}

func init() {
	helpTexts["run"] = `Usage: pglease run NAME [flags] -- COMMAND [ARG...]

Run COMMAND while holding the lease NAME, like flock(1) for a cluster. Without
--wait it exits 75 at once when another owner holds the lease. COMMAND runs in
a process group of its own with PGLEASE_NAME, PGLEASE_OWNER and PGLEASE_TOKEN
(the fencing token) in its environment. When the lease is lost the group gets
SIGTERM, then SIGKILL after --kill-grace, before anyone else can take the
lease, and pglease exits 76. When COMMAND exits, the lease is released at once.

Flags:
` + flagHelp(runFlags) + `
Exit status: COMMAND's own (128+N when a signal N killed it); 75 held by
another; 76 lease lost; 126 not executable; 127 not found; 2 usage; 1 error.

Examples:
  # cron: run on one host only, skip when another host runs it
  pglease run nightly-report -- /usr/local/bin/report.sh
  # wait up to 10 minutes for the lease
  pglease run --wait --timeout 10m db-migrate -- ./migrate up
  # a singleton worker with fast failover and a Kubernetes pod name as owner
  pglease run --wait --fast-failover --owner "$POD_NAME" queue-worker -- ./worker
`
	helpTexts["ls"] = `Usage: pglease ls [--json] [flags]

List the leases of a table: name, owner, fencing token, how long it has been
held, when it expires, the age of its last heartbeat and its state: held,
stale (held, but its heartbeat is older than half its TTL: the holder may be
stuck) or expired.

Flags:
` + flagHelp(lsFlags) + `
Examples:
  pglease ls
  pglease ls --json | jq '.[] | select(.state != "held")'
`
	helpTexts["list"] = helpTexts["ls"]
	helpTexts["status"] = `Usage: pglease status NAME [flags]

Show the lease NAME. Exit status 0 when it is held, 3 when it is free
(no row, or expired), 1 on errors.

Flags:
` + flagHelp(statusFlags) + `
Examples:
  pglease status nightly-report && echo "a report is running"
  pglease status --json nightly-report
`
	helpTexts["release"] = `Usage: pglease release NAME --force [flags]

Take the lease NAME away from its holder (an administrative action) and print
what was taken. The holder notices at its next renewal (a third of its TTL)
and terminates its command; waiters get the lease at once. Exit status 3 when
there was no such lease.

Flags:
` + flagHelp(releaseFlags) + `
Example:
  pglease release --force nightly-report
`
	helpTexts["migrate"] = `Usage: pglease migrate [flags]

Create the lease table, its token sequence and, for SCHEMA.TABLE, the schema
when they are missing; check an existing table. Every other command does
this on first use; run it once as an owner role when the roles that take
leases may not create tables.

Flags:
` + flagHelp(connFlags) + `
Example:
  PGLEASE_DSN=postgres://admin@db/app pglease migrate --table ops.leases
`
	helpTexts["schema"] = `Usage: pglease schema [--table [SCHEMA.]TABLE]

Print the SQL that creates the lease table, for migration tools. It needs no
database.

Flags:
` + flagHelp(schemaFlags) + `
Example:
  pglease schema --table ops.leases > migrations/001_pglease.sql
`
	helpTexts["cleanup"] = `Usage: pglease cleanup [flags]

Delete expired lease rows and print how many. Fencing tokens keep increasing.

Flags:
` + flagHelp(connFlags) + `
Example:
  pglease cleanup --table ops.leases
`
	helpTexts["version"] = `Usage: pglease version

Print the version of pglease.

Example:
  pglease version
`
	helpTexts["completion"] = `Usage: pglease completion bash|zsh

Print a shell completion script.

Examples:
  source <(pglease completion bash)
  pglease completion zsh > "${fpath[1]}/_pglease"
`
	helpTexts["demo"] = `Usage: pglease demo [--workers N]

Start a throwaway PostgreSQL cluster in a temporary directory (the server
binaries must be installed: initdb, pg_ctl, postgres), run N worker processes
that compete with 'pglease run --wait --fast-failover' for one job, let the
first holder finish, SIGKILL the next one, and show who holds the lease, the
fencing tokens, the hand-off gaps and the failover time. Everything it started
is removed at the end, also on Ctrl-C.

Flags:
` + flagHelp(demoFlags) + `
Example:
  pglease demo
`
}

const bashCompletion = `# bash completion for pglease; load with: source <(pglease completion bash)
_pglease() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion || return
    else
        cur="${COMP_WORDS[COMP_CWORD]}"; prev="${COMP_WORDS[COMP_CWORD-1]}"; cword=$COMP_CWORD; words=("${COMP_WORDS[@]}")
    fi
    local i
    for ((i = 1; i < cword; i++)); do
        if [[ ${words[i]} == -- ]]; then
            COMPREPLY=($(compgen -c -- "$cur")); return
        fi
    done
    if ((cword == 1)); then
        COMPREPLY=($(compgen -W "run ls status release migrate schema cleanup demo version completion help" -- "$cur"))
        return
    fi
    local common="--dsn --table --help"
    case ${words[1]} in
        run) COMPREPLY=($(compgen -W "$common --ttl --wait --timeout --owner --kill-grace --fast-failover --" -- "$cur")) ;;
        ls|list|status) COMPREPLY=($(compgen -W "$common --json" -- "$cur")) ;;
        release) COMPREPLY=($(compgen -W "$common --force" -- "$cur")) ;;
        migrate|cleanup) COMPREPLY=($(compgen -W "$common" -- "$cur")) ;;
        schema) COMPREPLY=($(compgen -W "--table --help" -- "$cur")) ;;
        demo) COMPREPLY=($(compgen -W "--workers --help" -- "$cur")) ;;
        completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
    esac
}
complete -F _pglease pglease
`

const zshCompletion = `#compdef pglease
# zsh completion for pglease; install with: pglease completion zsh > "${fpath[1]}/_pglease"
_pglease() {
    local -a commands common
    commands=(
        'run:run a command while holding a lease'
        'ls:list leases'
        'status:show a lease (exit 0 held, 3 free)'
        'release:take a lease from its holder (--force)'
        'migrate:create the lease table'
        'schema:print the DDL of the lease table'
        'cleanup:delete expired rows'
        'demo:fail-over demo on a throwaway PostgreSQL'
        'version:print the version'
        'completion:print a shell completion script'
    )
    common=('--dsn[connection string]:dsn:' '--table[lease table]:table:' '--help[show help]')
    if (( CURRENT == 2 )); then
        _describe 'command' commands
        return
    fi
    case $words[2] in
        run)
            _arguments $common '--ttl[lease TTL]:duration:' '--wait[wait for the lease]' \
                '--timeout[give up waiting after]:duration:' '--owner[owner label]:owner:' \
                '--kill-grace[SIGTERM to SIGKILL grace]:duration:' '--fast-failover[session-bound lease]' \
                '*::command:_normal' ;;
        ls|list|status) _arguments $common '--json[JSON output]' '*:name:' ;;
        release) _arguments $common '--force[really take the lease]' ':name:' ;;
        migrate|cleanup) _arguments $common ;;
        schema) _arguments '--table[lease table]:table:' ;;
        demo) _arguments '--workers[number of workers]:n:' ;;
        completion) _values 'shell' bash zsh ;;
    esac
}
_pglease "$@"
`
