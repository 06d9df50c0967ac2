package pglease

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// TestFastFailoverTakeoverTimes measures, for each topology of holders and
// waiters, how long after a fast-failover holder's session ends a waiter
// holds the name: from the return of pg_terminate_backend (the server has
// ended the session) to the return of the waiter's Acquire. The waiters'
// fallback poll is an hour and the TTL a minute, so every take-over is the
// session's end noticed. It runs only with PGLEASE_MEASURE=N (N trials of
// each topology) and prints p50/p99/max per topology; docs/FAILURE-MODES.md
// quotes its figures. The bounds themselves are checked by the topology
// tests and the combination test.
//
//	PGLEASE_MEASURE=30 go test -run TestFastFailoverTakeoverTimes -v .
func TestFastFailoverTakeoverTimes(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PGLEASE_MEASURE"))
	if n <= 0 {
		t.Skip("set PGLEASE_MEASURE=N to measure N take-overs per topology")
	}
	topologies := []struct {
		name string
		// holder returns a lease held, session-bound, by cs[0] or cs[1],
		// got the topology's way while the other clients wait (their
		// outcomes in got).
		setup func(t *testing.T, cs []*Client) (held *Lease, got []<-chan outcome)
		// clients: how many clients the topology uses.
		clients int
	}{
		{"first holder, 1 waiter", func(t *testing.T, cs []*Client) (*Lease, []<-chan outcome) {
			l := mustTry(t, cs[0], "ff")
			return l, waitAll(t, cs[0], cs[1:], "ff")
		}, 2},
		{"first holder, 3 waiting clients", func(t *testing.T, cs []*Client) (*Lease, []<-chan outcome) {
			l := mustTry(t, cs[0], "ff")
			return l, waitAll(t, cs[0], cs[1:], "ff")
		}, 4},
		{"after a hand-off, 2 waiting clients", func(t *testing.T, cs []*Client) (*Lease, []<-chan outcome) {
			l := mustTry(t, cs[0], "ff")
			got := waitAll(t, cs[0], cs[1:], "ff")
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			return receiveLease(t, got[0], "the hand-off"), got[1:]
		}, 3},
		{"after an expiry take-over, 2 waiting clients", func(t *testing.T, cs []*Client) (*Lease, []<-chan outcome) {
			if _, err := cs[0].TryAcquire(context.Background(), "ff", WithTTL(time.Minute)); err != nil {
				t.Fatal(err)
			}
			got := waitAll(t, cs[0], cs[1:], "ff")
			rows(t, cs[0]).SetExpiry("ff", -time.Second)
			cs[1].wake.hub.notify("ff", true) // as its expiry timer would
			return receiveLease(t, got[0], "the expiry take-over"), got[1:]
		}, 3},
		{"after a step-down, 2 waiting clients", func(t *testing.T, cs []*Client) (*Lease, []<-chan outcome) {
			l := mustTry(t, cs[0], "ff")
			got := waitAll(t, cs[0], cs[1:], "ff")
			if err := cs[2].RequestStepDown(context.Background(), "ff"); err != nil {
				t.Fatal(err)
			}
			pgtest.Receive(t, l.StepDownRequested(), "the step-down request")
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			return receiveLease(t, got[0], "the hand-off after the step-down"), got[1:]
		}, 3},
		{"after a take-over from a dead holder, 2 waiting clients", func(t *testing.T, cs []*Client) (*Lease, []<-chan outcome) {
			l := mustTry(t, cs[0], "ff")
			got := waitAll(t, cs[0], cs[1:], "ff")
			endSession(t, l)
			return receiveLease(t, got[0], "the first take-over"), got[1:]
		}, 3},
	}
	var report []string
	for _, tp := range topologies {
		var took []time.Duration
		for range n {
			t.Run(tp.name, func(t *testing.T) {
				cs := ffClients(t, tp.clients)
				held, got := tp.setup(t, cs)
				endSession(t, held)
				ended := time.Now()
				l := receiveFirst(t, got)
				took = append(took, time.Since(ended))
				if l.Token() <= held.Token() {
					t.Fatalf("token %d after %d", l.Token(), held.Token())
				}
			})
		}
		slices.Sort(took)
		if len(took) == 0 {
			continue
		}
		q := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
		report = append(report, fmt.Sprintf("| %s | %v | %v | %v | %d |", tp.name,
			q(0.5).Round(time.Millisecond/10), q(0.99).Round(time.Millisecond/10), took[len(took)-1].Round(time.Millisecond/10), len(took)))
	}
	t.Log("fast-failover take-over after the holder's session ended:\n| topology | p50 | p99 | max | n |\n|---|---:|---:|---:|---:|\n" +
		strings.Join(report, "\n"))
}

func mustTry(t *testing.T, c *Client, name string) *Lease {
	t.Helper()
	l, err := c.TryAcquire(context.Background(), name, ffOpts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitAll starts a fast-failover Acquire of name in each of cs, one after
// the other once the previous one is queued (holder's table).
func waitAll(t *testing.T, holder *Client, cs []*Client, name string) []<-chan outcome {
	t.Helper()
	got := make([]<-chan outcome, len(cs))
	for i, c := range cs {
		got[i] = waitFor(testCtx(t), c, name, ffOpts...)
		waitQueued(t, holder, c, name)
	}
	return got
}

// receiveFirst returns the lease of the first of got to acquire.
func receiveFirst(t *testing.T, got []<-chan outcome) *Lease {
	t.Helper()
	merged := make(chan outcome, len(got))
	for _, ch := range got {
		go func() {
			select {
			case o := <-ch:
				merged <- o
			case <-time.After(patience):
			}
		}()
	}
	return receiveLease(t, merged, "a waiter to take over")
}
