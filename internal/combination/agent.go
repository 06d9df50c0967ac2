package combination

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// EnvAgent is the environment variable that, set to a JSON [AgentConfig],
// makes the test binary run as an agent (see [RunAgent]).
const EnvAgent = "PGLEASE_COMBO_AGENT"

// AgentConfig describes one agent process: one pglease.Client.
type AgentConfig struct {
	DSN    string        `json:"dsn"`    // lease client (through the agent's proxy)
	Table  string        `json:"table"`  // as this agent spells it
	Schema string        `json:"schema"` // of the register tables
	Owner  string        `json:"owner"`  // also the application_name ("pglease <owner>")
	TTL    time.Duration `json:"ttl"`
	Poll   time.Duration `json:"poll"`
}

// RunAgent runs an agent until its stdin ends or it gets SIGTERM: it
// executes each command on a goroutine of its own and replies on stdout.
// At the end it cancels the calls still running and, once they have
// returned, closes its client (which releases what it holds), and says
// when Close was called and returned (ReplyClosed). It returns the exit
// code.
func RunAgent(cfgJSON string) int {
	var cfg AgentConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "agent: bad config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	a := &agent{cfg: cfg, ctx: ctx, leases: map[int]held{}}
	go func() {
		defer cancel()
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var cmd Command
			if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
				fmt.Fprintln(os.Stderr, "agent: bad command:", err)
				continue
			}
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.do(cmd)
			}()
		}
	}()
	<-ctx.Done()
	a.wg.Wait() // the calls end with ctx
	a.mu.Lock()
	c, app := a.c, a.app
	a.mu.Unlock()
	closed := Reply{K: ReplyClosed}
	if c != nil {
		// At once, as a service shutting down does: the calls cut by ctx
		// have returned, their statements may still be in flight.
		closed.Call = now()
		err := c.Close()
		closed.T, closed.Err = now(), describe(err)
	}
	a.watchers.Wait() // every lease has ended with Close
	if c != nil {
		a.send(closed) // (the driver need not wait for the exit: -race sleeps a second there)
	}
	if app != nil {
		app.Close()
	}
	return 0
}

// agent is the state of an agent process.
type agent struct {
	cfg      AgentConfig
	ctx      context.Context
	out      sync.Mutex // one reply line at a time
	wg       sync.WaitGroup
	watchers sync.WaitGroup

	mu     sync.Mutex
	c      *pglease.Client
	app    *pgxpool.Pool // the application's own pool, for the fenced writes
	leases map[int]held  // by handle, ended ones included
}

// held is what an acquisition returned: a lease, or the leases of a set.
type held struct {
	leases  []*pglease.Lease
	release func(context.Context) error
}

func now() int64 { return time.Now().UnixNano() }

func (a *agent) send(r Reply) {
	if r.T == 0 {
		r.T = now()
	}
	b, _ := json.Marshal(r)
	a.out.Lock()
	_, _ = os.Stdout.Write(append(b, '\n'))
	a.out.Unlock()
}

func (a *agent) client() (*pglease.Client, *pgxpool.Pool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.c, a.app
}

// do runs one command and replies.
func (a *agent) do(cmd Command) {
	r := Reply{K: ReplyReturn, Cmd: cmd.ID, Handle: cmd.Handle}
	if cmd.Op == CmdOpen {
		r.Call = now()
		r.Err = describe(a.open())
		a.send(r)
		return
	}
	c, app := a.client()
	if cmd.Op == CmdMigrate && c != nil {
		r.Call = now()
		ctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
		r.Err = describe(admin.Migrate(ctx, c))
		cancel()
		a.send(r)
		return
	}
	if c == nil {
		r.Call = now()
		r.Err = &ErrInfo{Msg: "agent: no client (open failed)"}
		a.send(r)
		return
	}
	ctx := a.ctx
	if cmd.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmd.Timeout)
		defer cancel()
	}
	var opts []pglease.Option
	if cmd.Fast {
		opts = append(opts, pglease.WithFastFailover())
	}
	if cmd.Slots > 1 {
		opts = append(opts, pglease.WithSlots(cmd.Slots))
	}
	if cmd.Shared {
		opts = append(opts, pglease.WithShared())
	}
	if cmd.Quota > 0 {
		opts = append(opts, pglease.WithQuota(cmd.Quota, cmd.Weight))
	}
	if cmd.MaxHold > 0 {
		opts = append(opts, pglease.WithMaxHold(cmd.MaxHold))
	}
	var err error
	r.Call = now()
	switch cmd.Op {
	case CmdAcquire, CmdTry:
		var l *pglease.Lease
		if cmd.Op == CmdAcquire {
			l, err = c.Acquire(ctx, cmd.Names[0], opts...)
		} else {
			l, err = c.TryAcquire(ctx, cmd.Names[0], opts...)
		}
		r.T = now()
		if err == nil {
			r.Leases = a.hold(cmd.Handle, held{leases: []*pglease.Lease{l}, release: l.Release}, cmd.Fast, c)
		}
	case CmdAll, CmdTryAll:
		var s *pglease.LeaseSet
		if cmd.Op == CmdAll {
			s, err = c.AcquireAll(ctx, cmd.Names, opts...)
		} else {
			s, err = c.TryAcquireAll(ctx, cmd.Names, opts...)
		}
		r.T = now()
		if err == nil {
			r.Leases = a.hold(cmd.Handle, held{leases: s.Leases(), release: s.Release}, cmd.Fast, c)
		}
	case CmdRelease:
		h, ok := a.held(cmd.Handle)
		if !ok {
			err = fmt.Errorf("agent: no lease %d", cmd.Handle)
			break
		}
		err = h.release(context.Background())
	case CmdGuard:
		err = a.guard(app, cmd)
	case CmdStepDown:
		err = c.RequestStepDown(ctx, cmd.Names[0])
	default:
		err = fmt.Errorf("agent: unknown command %q", cmd.Op)
	}
	if r.T == 0 {
		r.T = now()
	}
	r.Err = describe(err)
	a.send(r)
}

// open creates the client (and the application's pool) as a replica
// starting does; the driver then has every agent create the table at once
// (CmdMigrate).
func (a *agent) open() error {
	ctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
	defer cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.c != nil {
		return nil
	}
	if a.app == nil {
		pcfg, err := pgxpool.ParseConfig(a.cfg.DSN)
		if err != nil {
			return err
		}
		pcfg.MaxConns = 4
		pcfg.ConnConfig.RuntimeParams["application_name"] = "combination-app " + a.cfg.Owner
		app, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return err
		}
		a.app = app
	}
	c, err := pglease.Open(ctx, a.cfg.DSN, pglease.Config{
		Table: a.cfg.Table, Owner: a.cfg.Owner, TTL: a.cfg.TTL, PollInterval: a.cfg.Poll,
		StatementTimeout: 5 * time.Second, ConnectTimeout: 3 * time.Second, MaxConns: 6,
		Observer: observerFunc(func(e pglease.Event) {
			if e.Kind == pglease.EventContended {
				a.send(Reply{K: ReplyContended, Name: e.Name})
			}
		}),
	})
	if err != nil {
		return err
	}
	a.c = c
	return nil
}

func (a *agent) held(handle int) (held, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.leases[handle]
	return h, ok
}

// bound reports whether the row of a lease asked for with fast failover
// is bound to its holder's session, as the table says (the checker's
// "unbound fast-failover lease"). Once the row is gone or another holder's
// (the lease ended already, or the read failed), the table cannot say,
// and it reports the lease as asked for.
func bound(c *pglease.Client, l *pglease.Lease) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	in, err := c.Get(ctx, l.Name())
	if err != nil || in.Token != l.Token() {
		return true
	}
	return in.FastFailover
}

// hold keeps what an acquisition returned under handle, reports each
// lease's end, and releases it when some client asks its holder to step
// down (the holder's decision, here always to obey). fast says whether
// the leases were asked for with fast failover.
func (a *agent) hold(handle int, h held, fast bool, c *pglease.Client) []Granted {
	a.mu.Lock()
	a.leases[handle] = h
	a.mu.Unlock()
	var out []Granted
	var once sync.Once
	for _, l := range h.leases {
		out = append(out, Granted{Row: l.Name(), Token: l.Token(), Session: fast && bound(c, l), Dl: l.Deadline().UnixNano()})
		a.watchers.Add(1)
		go func() {
			defer a.watchers.Done()
			select {
			case <-l.Context().Done():
			case <-l.StepDownRequested():
				once.Do(func() {
					a.send(Reply{K: ReplyStepDown, Handle: handle, Name: l.Name(), Token: l.Token()})
					call := now()
					err := h.release(context.Background())
					a.send(Reply{K: ReplyReleased, Handle: handle, Call: call, Err: describe(err)})
				})
				<-l.Context().Done()
			}
			a.send(Reply{K: ReplyDone, Handle: handle, Name: l.Name(), Token: l.Token(), Dl: l.Deadline().UnixNano(), Cause: describe(context.Cause(l.Context()))})
		}()
	}
	return out
}

// guard makes one fenced write with the lease cmd.Row of cmd.Handle: in
// one transaction of the application's own pool, Lease.Guard, then the
// register's new value and a line in its log (whose presence after the
// run says whether the write committed).
func (a *agent) guard(app *pgxpool.Pool, cmd Command) error {
	h, ok := a.held(cmd.Handle)
	if !ok {
		return fmt.Errorf("agent: no lease %d", cmd.Handle)
	}
	var l *pglease.Lease
	for _, x := range h.leases {
		if x.Name() == cmd.Row {
			l = x
		}
	}
	if l == nil {
		return fmt.Errorf("agent: lease %d has no row %q", cmd.Handle, cmd.Row)
	}
	ctx, cancel := context.WithTimeout(a.ctx, 5*time.Second)
	defer cancel()
	reg, log := pgx.Identifier{a.cfg.Schema, "register"}.Sanitize(), pgx.Identifier{a.cfg.Schema, "writes"}.Sanitize()
	return pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if err := l.Guard(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+reg+` (name, token, value) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET token = excluded.token, value = excluded.value`, l.Name(), l.Token(), cmd.Value); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+log+` (cmd, name, token, value) VALUES ($1, $2, $3, $4)`, cmd.ID, l.Name(), l.Token(), cmd.Value)
		return err
	})
}

// RegisterDDL creates the register tables in schema: the register (one row
// per lease row, the last committed value) and the log of committed
// writes.
func RegisterDDL(schema string) string {
	s := pgx.Identifier{schema}.Sanitize()
	return `CREATE TABLE ` + s + `.register (name text PRIMARY KEY, token bigint NOT NULL, value bigint NOT NULL);
	CREATE TABLE ` + s + `.writes (seq bigserial PRIMARY KEY, cmd int NOT NULL, name text NOT NULL, token bigint NOT NULL, value bigint NOT NULL);`
}

// observerFunc adapts a function to pglease.Observer.
type observerFunc func(pglease.Event)

func (f observerFunc) Observe(e pglease.Event) { f(e) }
