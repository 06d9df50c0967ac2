package cli

import "context"

const mainHelpHead = `pglease — leases (distributed locks) in PostgreSQL

Usage:
`

// mainHelpTail follows the command list generated from the command table.
const mainHelpTail = `
Connection: --dsn, else $PGLEASE_DSN, else $DATABASE_URL, else the libpq
PG* variables (PGHOST, PGUSER, PGPASSWORD, .pgpass, PGSERVICE...).

Examples:
  pglease demo
  pglease run nightly-report -- ./report.sh
  pglease run --wait --timeout 10m db-migrate -- ./migrate up
  pglease cron /etc/pglease/crontab
  pglease ls

Run 'pglease COMMAND --help' for the flags of a command.
Exit statuses of run: COMMAND's own; 75 (or --conflict-exit-code) held by
another; 76 lease lost; 125 pglease's own failure; 126/127 COMMAND not
executable/not found. Other commands: 0 ok, 1 error, 2 usage, 3 free (or
no such job).
`

func init() {
	commands = []*command{{
		name: "run", args: "NAME [flags] -- COMMAND [ARG...]", flags: runFlags,
		summary: "run COMMAND while holding lease NAME",
		operand: "lease name", dashdash: true,
		run: (*env).cmdRun,
		about: `Run COMMAND while holding the lease NAME, like flock(1) for a cluster. Without
--wait it exits 75 (or --conflict-exit-code) at once when another owner holds
the lease. COMMAND runs in a process group of its own with PGLEASE_NAME,
PGLEASE_OWNER and PGLEASE_TOKEN (the fencing token) in its environment, and
PGLEASE_SLOT with --slots. When the lease is lost the group gets SIGTERM, then
SIGKILL after --kill-grace, before anyone else can take the lease (SIGKILL at
once when a --fast-failover lease lost its database session), and pglease
exits 76. A step-down request (pglease stepdown NAME) sends COMMAND SIGTERM
and lets it stop in its own time. When COMMAND exits, the lease is released
at once (or when --min-hold has passed). The group never outlives pglease,
even a SIGKILLed pglease or a SIGKILL to its whole process group.
`,
		more: `Exit status: COMMAND's own (128+N when a signal N killed it); 75 (or
--conflict-exit-code) held by another; 76 lease lost; 125 pglease's own
failure (usage, invalid input, database unreachable or refusing us);
126 not executable; 127 not found.

Examples:
  # cron: run on one host only, skip quietly when another host runs it
  pglease run nightly-report --conflict-exit-code 0 -- /usr/local/bin/report.sh
  # one run per schedule across hosts whose clocks differ by up to a minute
  pglease run nightly-report --ttl 2m --min-hold 1m -- /usr/local/bin/report.sh
  # wait up to 10 minutes for the lease
  pglease run --wait --timeout 10m db-migrate -- ./migrate up
  # at most 3 exports at once; each learns its slot from $PGLEASE_SLOT
  # (every run of export must say --slots 3: another N exits 125)
  pglease run --wait --slots 3 export -- ./export.sh
  # a singleton worker with fast failover and a Kubernetes pod name as owner
  pglease run --wait --fast-failover --owner "$POD_NAME" queue-worker -- ./worker
`,
	}, {
		name: "cron", args: "FILE", flags: cronFlags,
		summary: "run the jobs of a crontab, each tick on one replica",
		operand: "crontab file", files: true,
		run: (*env).cmdCron,
		about: `Run the jobs of FILE, a crontab with a name per job, on a fleet of replicas:
start 'pglease cron FILE' with the same FILE and --table on several hosts or
pods, and each tick of each job runs its COMMAND once, on one of them. A
tick is claimed once in the database, when it is due by the server's clock:
clock skew between replicas neither doubles nor drops it, and a replica that
is down loses no tick while another one runs.

Each line of FILE is
  NAME  SCHEDULE  [OPTIONS]  --  COMMAND
NAME is the job's name (1 to 200 bytes, unique in the table). SCHEDULE is 5
cron fields (minute hour day-of-month month day-of-week), 6 with seconds
first, @hourly, @daily, @weekly, @monthly, @yearly, or @every DURATION (the
multiples of DURATION since the Unix epoch; at least 1s). COMMAND, the rest
of the line, runs with /bin/sh -c. Blank lines and lines starting with # are
ignored. A line CRON_TZ=ZONE (an IANA name such as Europe/Berlin) sets the
time zone of the schedules after it (default UTC, whatever the replicas'
zones); a SCHEDULE may start with its own CRON_TZ=ZONE. OPTIONS, written
--missed=POLICY, --overlap=POLICY or --abandoned=POLICY, set the policies of
one job; the flags set them for the others. Every invalid line is reported
as FILE:LINE before anything connects.

COMMAND runs as pglease run runs its command: in a process group of its own
(stdin from /dev/null, stdout and stderr inherited) with PGLEASE_JOB,
PGLEASE_TICK (the scheduled instant, RFC 3339 in UTC), PGLEASE_NAME (the
job's lease, cron:NAME), PGLEASE_TOKEN (its fencing token), PGLEASE_OWNER
and PGLEASE_ATTEMPT (1, more for a tick run again by --abandoned=retry:N)
in its environment. When the job's lease is lost, the group gets SIGTERM,
then SIGKILL after --kill-grace, before anyone else could take the lease;
when pglease cron dies, even by SIGKILL, the group is killed. COMMAND's exit
status is the run's outcome in the history (pglease jobs): 0 succeeded,
else failed with "exit status N" or "killed by signal N".

SIGINT, SIGTERM, SIGHUP and SIGQUIT stop pglease cron: it claims no more
ticks, passes the signal on to the running commands, waits for them
(SIGKILL after --kill-grace; a second signal kills them at once), releases
their leases and exits 0. SIGUSR1 and SIGUSR2 are passed on.
`,
		more: `Exit status: 0 after a stop signal, or when --check found FILE valid; 2 usage
errors: bad flags, a FILE that cannot be read, invalid lines; 1 other errors
(database unreachable or refusing us).

Example FILE:
  # NAME          SCHEDULE                      -- COMMAND
  nightly-report  0 3 * * *                     -- /usr/local/bin/report --full
  cleanup         @every 15m                    -- find /var/tmp/app -mtime +1 -delete
  CRON_TZ=Europe/Berlin
  invoices        30 6 * * 1-5 --overlap=queue  -- /usr/local/bin/send-invoices

Examples:
  pglease cron --check /etc/pglease/crontab
  pglease cron --owner "$POD_NAME" --fast-failover /etc/pglease/crontab
`,
	}, {
		name: "ls", aliases: []string{"list"}, args: "[--json]", flags: lsFlags,
		summary: "list leases",
		run:     (*env).cmdList,
		about: `List the leases of a table: name, owner, fencing token, how long it has been
held, when it expires, the age of its last heartbeat and its state: held,
stale (held, but its heartbeat is older than half its TTL: the holder may be
stuck) or expired.
`,
		more: `Examples:
  pglease ls
  pglease ls --json | jq '.[] | select(.state != "held")'
`,
	}, {
		name: "serve", flags: serveFlags,
		summary: "serve a live web console of the leases, with /metrics",
		run:     (*env).cmdServe,
		about: `Serve an operator console: a web page listing every lease of the table (name,
owner, token, held for, expires in, heartbeat age, state, metadata) that
updates itself within a second of any acquisition, release, loss or expiry,
with a feed of recent changes. Updates are pushed to the browsers; the
database sees one listener and one cheap read of the token sequence per
--poll, however many people watch. /metrics (Prometheus) and /healthz (200
while the database is being read) are served beside the page.

It only reads (a role with SELECT on the table will do) and never creates or
alters anything: without the table the page says so. --allow-release adds a
force-release button to every lease, behind a confirmation and a per-process
CSRF token. Listening on an address other than loopback needs an access
token (--token-file FILE or $PGLEASE_SERVE_TOKEN), required on every request
as "Authorization: Bearer TOKEN" or, in a browser, once as /?token=TOKEN.
Without a token it answers only requests addressed to a loopback address or
localhost (421 for any other Host, so that a web page whose name resolves to
this machine cannot read or change it: DNS rebinding), and a release only
from a page of those origins; --allow-host NAME adds a name. With a token,
requests that carry it may name any host unless --allow-host is given.
SIGINT or SIGTERM stop it (exit 0).
`,
		more: `Exit status: 0 after SIGINT or SIGTERM; 2 usage errors; 1 other errors
(database unreachable at start, address in use).

Examples:
  pglease serve                                   # http://127.0.0.1:8080/
  pglease serve --table ops.leases --allow-release
  pglease serve --allow-host console.internal      # behind a proxy that keeps the Host
  openssl rand -hex 32 > /etc/pglease/console-token
  pglease serve --listen :8080 --token-file /etc/pglease/console-token
  curl -H "Authorization: Bearer $(cat /etc/pglease/console-token)" http://host:8080/metrics
`,
	}, {
		name: "jobs", args: "[JOB]", flags: jobsFlags,
		summary: "list scheduled jobs, or the runs of JOB",
		operand: "job name",
		run:     (*env).cmdJobs,
		about: `List the scheduled jobs of a table (those that pglease cron and the Go package
pgleasecron run) with their schedule, last run (tick, outcome, replica,
duration) and next tick; with JOB, its newest runs. Outcomes: succeeded;
failed (with the exit status or error); lost (the job's lease ended while it
ran); abandoned (its replica died); skipped (the job's previous run was still
going); missed (no replica ran it in time); running. Times are RFC 3339 in
UTC, durations by the server's clock. Only reads: no jobs when the tables do
not exist. Exit status 3 when there is no job JOB.
`,
		more: `Examples:
  pglease jobs
  pglease jobs nightly-report --limit 5
  pglease jobs --json | jq '.[] | select(.last_run.status == "failed")'
`,
	}, {
		name: "status", args: "NAME", flags: statusFlags,
		summary: "exit 0 if NAME is held, 3 if free",
		operand: "lease name",
		run:     (*env).cmdStatus,
		about: `Show the lease NAME. Exit status 0 when it is held, 3 when it is free
(no row, or expired), 1 on errors.
`,
		more: `Examples:
  pglease status nightly-report && echo "a report is running"
  pglease status --json nightly-report
`,
	}, {
		name: "release", args: "NAME --force", flags: releaseFlags,
		summary: "take a lease from its holder",
		operand: "lease name",
		run:     (*env).cmdRelease,
		about: `Take the lease NAME away from its holder (an administrative action) and print
what was taken. The holder notices at its next renewal (a third of its TTL)
and terminates its command; waiters get the lease at once. Exit status 3 when
there was no such lease; 1, creating nothing, when there is no such table.
`,
		more: `Example:
  pglease release --force nightly-report
`,
	}, {
		name: "stepdown", args: "NAME", flags: connFlags,
		summary: "ask the holder of a lease to let go",
		operand: "lease name",
		run:     (*env).cmdStepDown,
		about: `Ask whoever holds the lease NAME to let go of it gracefully, for a rolling
deploy: a leader elected with the Go library's Elector ends its term,
releases the lease and stays out of the election for a while, so that
another instance takes over before this one is stopped. A program holding a
plain lease sees the request and decides for itself. The request is
delivered at once to a holder that listens, else with its next renewal.
Nothing is taken by force (see release --force). Exit status 3 when nothing
holds NAME; 1, creating nothing, when there is no such table.
`,
		more: `Example:
  pglease stepdown scheduler-leader && kubectl rollout restart deploy/scheduler
`,
	}, {
		name: "migrate", flags: connFlags,
		summary: "create the lease table",
		run:     (*env).cmdMigrate,
		about: `Create the lease table, its token sequence and, for SCHEMA.TABLE, the schema
when they are missing; check an existing table. run does this on first use;
release, stepdown and cleanup upgrade a table that exists but never create
one (ls and status only read); run it once as an owner role when the roles
that take leases may not create tables.
`,
		more: `Example:
  PGLEASE_DSN=postgres://admin@db/app pglease migrate --table ops.leases
`,
	}, {
		name: "schema", flags: schemaFlags,
		summary: "print the table's DDL",
		run:     func(e *env, _ context.Context, args []string) int { return e.cmdSchema(args) },
		about: `Print the SQL that creates the lease table, and the tables of scheduled jobs
(pglease cron), for migration tools. It needs no database.
`,
		more: `Example:
  pglease schema --table ops.leases > migrations/001_pglease.sql
`,
	}, {
		name: "cleanup", flags: connFlags,
		summary: "delete expired rows",
		run:     (*env).cmdCleanup,
		about: `Delete expired lease rows and print how many. Fencing tokens keep increasing.
Without the table it creates nothing and exits 1.
`,
		more: `Example:
  pglease cleanup --table ops.leases
`,
	}, {
		name: "doctor", flags: doctorFlags,
		summary: "check what a deployment needs before it relies on pglease",
		run:     (*env).cmdDoctor,
		about: `Check, as the role the DSN names, what pglease needs of the server and of the
path to it, and say what to change: the role's privileges on the lease table
and every object of it (or whether it may create the table), a connection
pooler in the path and whether it pools by transaction, that a notification
sent is received, idle_session_timeout and statement_timeout against the
TTL, synchronous_commit and the standbys, the server's clock against this
host's, the server version, and the connections left for a fleet of N
clients (--fleet). It only reads.

Exit status: 0 when every check passed, 3 when some warned (pglease works,
but something should change), 1 when one failed (it cannot work as it is),
2 on usage errors.
`,
		more: `Examples:
  pglease doctor --table ops.leases --ttl 15s
  pglease doctor --fleet 200 --json | jq '.checks[] | select(.status != "ok")'
`,
	}, {
		name: "demo", flags: demoFlags,
		summary: "watch workers fail over on a throwaway PostgreSQL",
		run:     (*env).cmdDemo,
		about: `Start a throwaway PostgreSQL cluster in a temporary directory (the server
binaries must be installed: initdb, pg_ctl, postgres), run N worker processes
that compete with 'pglease run --wait --fast-failover' for one job, SIGKILL
the first holder mid-job, let the worker that takes over finish and hand the
lease on, SIGKILL that next holder too, and show who holds the lease, the
fencing tokens, the hand-off gaps and the failover times. Everything it
started is removed at the end, also on Ctrl-C (exit 130).

The demo checks its figures against what pglease promises: each failover
after a SIGKILL and each hand-off under 1s, a killed holder's job gone within
1s, fencing tokens increasing, one holder at a time. A figure that misses gets
a line of its own starting with MISSED.
`,
		more: `Exit status: 0 when every figure keeps its promise; 1 when one misses (a
MISSED line says which) or the demo fails otherwise; 2 usage errors; 130
interrupted.

Examples:
  pglease demo
  pglease demo --workers 6 --hold 3s
`,
	}, {
		name:    "version",
		summary: "print the version",
		run:     func(e *env, _ context.Context, args []string) int { return e.cmdVersion(args) },
		about: `Print the version of pglease: the module version (v1.2.3 when installed with
'go install github.com/pglease/pglease/cmd/pglease@v1.2.3'; for a build from
a checkout, (devel) or a pseudo-version naming the commit), the VCS revision
when the build recorded one (+dirty: with uncommitted changes), the Go
version and the platform. 'pglease --version' does the same.
`,
		more: `Example:
  pglease version
`,
	}, {
		name: "completion", args: shellList("|"),
		summary: "print a shell completion script",
		operand: "shell", words: completionShells(),
		run: func(e *env, _ context.Context, args []string) int { return e.cmdCompletion(args) },
		about: `Print a completion script for bash, zsh or fish. The scripts complete the
commands, their flags, and after 'pglease run NAME --' the command to run.
`,
		more: `Examples:
  # bash: for this shell, or for every new one
  source <(pglease completion bash)
  pglease completion bash > ~/.local/share/bash-completion/completions/pglease
  # zsh: into a directory of $fpath, before compinit runs
  pglease completion zsh > "${fpath[1]}/_pglease"
  # fish
  pglease completion fish > ~/.config/fish/completions/pglease.fish
`,
	}, {
		name: "help", args: "[COMMAND]",
		summary: "show the help of pglease or of COMMAND",
		operand: "command",
		run:     func(e *env, _ context.Context, args []string) int { return e.cmdHelp(args) },
		about: `Print the help of pglease, or of COMMAND (the same as 'pglease COMMAND --help').
`,
		more: `Example:
  pglease help run
`,
	}, {
		name: superviseCmd, hidden: true,
		run: func(e *env, _ context.Context, args []string) int { return supervise(args, e.stderr) },
	}, {
		name: demoJobCmd, hidden: true,
		run: func(e *env, ctx context.Context, args []string) int { return demoJob(ctx, args, e.stdout) },
	}}
	// help completes the names of the commands, which needs the table.
	lookupCommand("help").words = visibleNames()
}
