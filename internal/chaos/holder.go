package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
)

// EnvHolder is the environment variable that, set to a JSON HolderConfig,
// makes the chaos test binary run as a holder process (see RunHolder).
const EnvHolder = "PGLEASE_CHAOS_HOLDER"

// HolderConfig describes one holder process.
type HolderConfig struct {
	DSN           string        // lease client connection
	Table         string        // lease table
	Fence         string        // resource schema: <Fence>.fence and <Fence>.writes
	Names         []string      // one worker goroutine per name
	Owner         string        // owner label (also the application_name)
	Log           string        // history file
	TTL           time.Duration //
	CSMin, CSMax  time.Duration // critical section length
	Step          time.Duration // time between checks inside a section
	FastFailover  bool
	DisableNotify bool
	MaxConns      int32
	// PauseGap is the loop gap the holder treats as a pause it was
	// subjected to (default TTL/2).
	PauseGap time.Duration
}

// RunHolder runs a holder process until SIGTERM or SIGINT: every worker
// acquires its name, runs a critical section of checks and guarded, fenced
// writes, and releases it, recording every step. It returns the exit code.
func RunHolder(cfgJSON string) int {
	var hc HolderConfig
	if err := json.Unmarshal([]byte(cfgJSON), &hc); err != nil {
		fmt.Fprintln(os.Stderr, "holder: bad config:", err)
		return 2
	}
	if hc.PauseGap == 0 {
		hc.PauseGap = hc.TTL / 2
	}
	if hc.Step == 0 {
		hc.Step = 10 * time.Millisecond
	}
	rec, err := NewRecorder(hc.Log, hc.Owner)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	defer rec.Close()
	rec.Record(Event{K: KindStart})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The application's own pool, for the fenced writes; the lease client
	// has a pool of its own (as when a library and an app share nothing).
	pcfg, err := pgxpool.ParseConfig(hc.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	pcfg.MaxConns = int32(len(hc.Names) + 1)
	pcfg.ConnConfig.RuntimeParams["application_name"] = "pglease " + hc.Owner
	pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	app, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	defer app.Close()

	var c *pglease.Client
	for c == nil {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err = pglease.Open(octx, hc.DSN, pglease.Config{
			Table: hc.Table, Owner: hc.Owner, TTL: hc.TTL, DisableNotify: hc.DisableNotify,
			MaxConns: hc.MaxConns, StatementTimeout: 5 * time.Second, ConnectTimeout: 3 * time.Second,
			Observer: observerFunc(func(e pglease.Event) {
				switch e.Kind {
				case pglease.EventContended:
					rec.Record(Event{K: KindWaiting, Name: e.Name, Msg: e.Previous})
				case pglease.EventRenewed:
					rec.Record(Event{K: KindRenewed, Name: e.Name, Tok: e.Token})
				}
			}),
		})
		cancel()
		if err != nil {
			rec.Record(Event{K: KindError, Msg: "open: " + err.Error()})
			select {
			case <-ctx.Done():
				return 0
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	var watchers sync.WaitGroup
	defer watchers.Wait() // after c.Close: every lease has ended
	defer c.Close()

	var wg sync.WaitGroup
	for _, name := range hc.Names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := &holder{wg: &watchers, hc: hc, c: c, app: app, rec: rec, name: name}
			h.loop(ctx)
		}()
	}
	wg.Wait()
	return 0
}

type holder struct {
	wg   *sync.WaitGroup // watch goroutines; waited for before the recorder closes
	hc   HolderConfig
	c    *pglease.Client
	app  *pgxpool.Pool
	rec  *Recorder
	name string
}

func (h *holder) loop(ctx context.Context) {
	var opts []pglease.Option
	if h.hc.FastFailover {
		opts = append(opts, pglease.WithFastFailover())
	}
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		l, err := h.c.Acquire(actx, h.name, opts...)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				h.rec.Record(Event{K: KindError, Name: h.name, Msg: "acquire: " + err.Error()})
				sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		h.rec.Record(Event{K: KindAcquired, Name: h.name, Tok: l.Token(), Dl: l.Deadline().UnixNano()})
		h.watch(l)
		h.section(ctx, l)
		// The holder stops believing in the lease here, before the release
		// lets a successor in (Done is recorded later, by another goroutine).
		h.rec.Record(Event{K: KindReleased, Name: h.name, Tok: l.Token()})
		if err := l.Release(context.Background()); err != nil {
			h.rec.Record(Event{K: KindError, Name: h.name, Tok: l.Token(), Msg: "release: " + err.Error()})
		}
		// A short rest so that other processes get a turn.
		sleep(ctx, time.Duration(rand.N(int64(20*time.Millisecond))))
	}
}

// watch records the moment the lease's Done fires (its context is
// cancelled), with its local deadline then, whatever ends it: released,
// lost (deadline, renewal, session ended) or the client closed.
func (h *holder) watch(l *pglease.Lease) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		<-l.Context().Done()
		h.rec.Record(Event{K: KindDone, Name: h.name, Tok: l.Token(), Dl: l.Deadline().UnixNano(), Msg: fmt.Sprint(context.Cause(l.Context()))})
	}()
}

func randDur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rand.N(int64(hi-lo)))
}

// section runs one critical section: repeated checks, each followed by a
// guarded, fenced write.
func (h *holder) section(ctx context.Context, l *pglease.Lease) {
	end := time.Now().Add(randDur(h.hc.CSMin, h.hc.CSMax))
	// prev is when the previous step's write began: a pause that lands in
	// the write (the commonest place, and one where the server may end the
	// paused transaction) counts as a gap like one that lands in the sleep.
	prev := time.Now()
	for ctx.Err() == nil {
		t := time.Now()
		held := l.Context().Err() == nil
		dl := l.Deadline()
		if t.After(dl) {
			if gap := t.Sub(prev); gap > h.hc.PauseGap {
				// The process was paused (or starved) past its deadline:
				// its lease must already have ended.
				h.rec.Record(Event{K: KindResume, Name: h.name, Tok: l.Token(), T: t.UnixNano(), OK: !held, Gap: int64(gap)})
			}
			if held {
				h.rec.Record(Event{K: KindStale, Name: h.name, Tok: l.Token(), T: t.UnixNano(), Gap: int64(t.Sub(dl))})
			}
		}
		if !held {
			h.rec.Record(Event{K: KindLost, Name: h.name, Tok: l.Token(), Msg: fmt.Sprint(context.Cause(l.Context()))})
			// A careless holder writes anyway: an external resource that
			// only knows tokens must reject it once a newer token wrote.
			h.staleWrite(l)
			return
		}
		if t.After(end) {
			return
		}
		h.rec.Record(Event{K: KindBelief, Name: h.name, Tok: l.Token(), T: t.UnixNano()})
		prev = time.Now()
		h.write(l)
		sleep(ctx, h.hc.Step)
	}
}

// write commits one guarded, fenced write: Lease.Guard in the app's own
// transaction, then the fence (last token seen, never lower), then a log
// row whose sequence number orders the committed writes.
func (h *holder) write(l *pglease.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e := Event{K: KindWrite, Name: h.name, Tok: l.Token()}
	err := pgx.BeginFunc(ctx, h.app, func(tx pgx.Tx) error {
		if err := l.Guard(ctx, tx); err != nil {
			e.Msg = "guard"
			return err
		}
		var n, last int64
		if err := tx.QueryRow(ctx, fenceSQL(h.hc.Fence), h.name, l.Token()).Scan(&n, &last); err != nil {
			return err
		}
		e.Last = last
		if n == 0 {
			e.Msg = "fence"
			return errors.New("fence rejected")
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{h.hc.Fence, "writes"}.Sanitize()+
			` (name, token, pid) VALUES ($1, $2, $3)`, h.name, l.Token(), os.Getpid())
		return err
	})
	e.OK = err == nil
	if err != nil && e.Msg == "" {
		e.Msg = "err: " + err.Error()
	}
	h.rec.Record(e)
}

// staleWrite makes a plain fenced write (no Guard: an external resource
// that only knows tokens) with a token the holder may no longer own.
func (h *holder) staleWrite(l *pglease.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n, last int64
	err := h.app.QueryRow(ctx, fenceSQL(h.hc.Fence), h.name, l.Token()).Scan(&n, &last)
	e := Event{K: KindStaleW, Name: h.name, Tok: l.Token(), OK: err == nil && n == 1, Last: last}
	if err != nil {
		e.Msg = err.Error()
	}
	h.rec.Record(e)
}

// fenceSQL accepts a write only if its token is at least the last one
// seen, and returns whether it did and the last token before it.
func fenceSQL(schema string) string {
	f := pgx.Identifier{schema, "fence"}.Sanitize()
	return `WITH u AS (UPDATE ` + f + ` SET last_token = $2, writes = writes + 1
	                    WHERE name = $1 AND last_token <= $2 RETURNING 1)
	        SELECT (SELECT count(*) FROM u), coalesce((SELECT last_token FROM ` + f + ` WHERE name = $1), -1)`
}

// FenceDDL creates the resource tables in schema for names.
func FenceDDL(schema string) string {
	s := pgx.Identifier{schema}.Sanitize()
	return `CREATE TABLE IF NOT EXISTS ` + s + `.fence (name text PRIMARY KEY, last_token bigint NOT NULL DEFAULT 0, writes bigint NOT NULL DEFAULT 0);
	CREATE TABLE IF NOT EXISTS ` + s + `.writes (seq bigserial PRIMARY KEY, name text NOT NULL, token bigint NOT NULL, pid int NOT NULL);`
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// observerFunc adapts a function to pglease.Observer.
type observerFunc func(pglease.Event)

func (f observerFunc) Observe(e pglease.Event) { f(e) }
