package pglease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// Three electors, each with an observer: the winner reports Elected, then
// itself as the leader; the others report the winner's owner and token as
// the leader, never Elected. After a resignation the old leader reports
// Demoted, then the new leader; the new one reports Elected with a greater
// token; the third reports the new leader.
func TestElectorReportsElectedDemotedAndLeaderChangedInOrder(t *testing.T) {
	ctx := testCtx(t)
	first := testClient(t, Config{})
	logs := make([]*eventLog, 3)
	clients := make([]*Client, 3)
	electors := make([]*Elector, 3)
	elected := make(chan int, 100)
	for i := range electors {
		logs[i] = newEventLog()
		clients[i] = testClient(t, Config{Table: first.cfg.Table, Observer: logs[i]})
		e, err := clients[i].NewElector("leader", func(ctx context.Context) error {
			elected <- i
			<-ctx.Done()
			return nil
		}, ElectorConfig{LeaseOptions: []Option{WithTTL(time.Second)}})
		if err != nil {
			t.Fatal(err)
		}
		electors[i] = e
	}
	for _, e := range electors {
		runElector(t, ctx, e)
	}
	leaderIs := func(owner string, token int64) func(Event) bool {
		return func(e Event) bool {
			return e.Kind == EventLeaderChanged && e.Owner == owner && (token == 0 || e.Token == token)
		}
	}

	cur := pgtest.Receive(t, elected, "a leader to be elected")
	owner := clients[cur].Owner()
	won := logs[cur].await(t, "Elected on the winner", is(EventElected, "leader"))
	if won.Owner != owner || won.Token != currentTerm(electors[cur]).Token() {
		t.Fatalf("Elected %+v", won)
	}
	if e := logs[cur].await(t, "the winner to report itself as the leader", is(EventLeaderChanged, "leader")); e.Owner != owner || e.Token != won.Token {
		t.Fatalf("the winner reported %+v as the leader", e)
	}
	for i := range logs {
		if i == cur {
			continue
		}
		logs[i].await(t, fmt.Sprintf("elector %d to see the winner", i), leaderIs(owner, won.Token))
		for _, k := range logs[i].kinds() {
			if k == EventElected || k == EventDemoted {
				t.Fatalf("elector %d, which never led, reported %v", i, k)
			}
		}
	}

	electors[cur].Resign()
	next := pgtest.Receive(t, elected, "another elector to lead after the resignation")
	if next == cur {
		t.Fatal("the resigned leader led again before anyone else")
	}
	third := 3 - cur - next
	d := logs[cur].await(t, "Demoted on the old leader", is(EventDemoted, "leader"))
	if d.Owner != owner || d.Token != won.Token || d.Err != nil {
		t.Fatalf("Demoted %+v", d)
	}
	again := logs[next].await(t, "Elected on the new leader", is(EventElected, "leader"))
	if again.Owner != clients[next].Owner() || again.Token <= won.Token {
		t.Fatalf("Elected %+v after token %d", again, won.Token)
	}
	logs[next].await(t, "the new leader to report itself", leaderIs(clients[next].Owner(), again.Token))
	logs[cur].await(t, "the old leader to see the new one", leaderIs(clients[next].Owner(), again.Token))
	logs[third].await(t, "the third elector to see the new leader", leaderIs(clients[next].Owner(), again.Token))
}
