package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/cmd/pglease/internal/human"
	"github.com/pglease/pglease/cmd/pglease/internal/queue"
)

// The states of a lease row, as pglease ls shows them.
const (
	stateHeld    = "held"
	stateStale   = "stale"   // held, but its heartbeat is older than the stale threshold
	stateExpired = "expired" // its row is still there, but nobody holds it
)

// lease is one row of a snapshot, with its state at the read.
type lease struct {
	pglease.Info
	State      string
	StaleAfter time.Duration  // the threshold this row was judged by
	Waiters    []admin.Waiter // who waits for it, first in line first (see queue.Of)
}

// status is what the page shows about the console's own connections.
type status struct {
	DBUp  bool   // the last read succeeded
	Error string // why the last read failed, redacted
	// Refused: the last read failed on the server's answer (a privilege
	// the role lacks, a table of another shape), so the server is
	// reachable; TableExists is then what the read learnt before it.
	Refused     bool
	ListenerUp  bool // the notification listener is connected
	SequenceOK  bool // acquisitions are detected by the token sequence
	QueuesOK    bool // who waits was read (the role may read the waiters table)
	TableExists bool
}

// snapshot is the hub's latest view of the table. It is immutable once
// published.
type snapshot struct {
	Version   uint64
	ServerNow time.Time // server clock at the last successful read
	ReadAt    time.Time // local clock (monotonic) of that read; zero before the first
	Leases    []lease   // ordered by name
	Status    status
	Feed      []event // newest last, at most feedLength

	// data is the page's JSON of the snapshot, encoded once when it is
	// published, whatever the number of viewers it goes to.
	data []byte
}

// feedLength bounds the feed of recent changes.
const feedLength = 50

// event is one entry of the feed of recent changes.
type event struct {
	At   time.Time // server clock
	Kind string    // acquired, released, expired, taken-over, stale, renewed, removed, table
	Name string
	Text string
}

// key identifies the event to the page's script.
func (e event) key() string {
	return strconv.FormatInt(e.At.UnixMilli(), 10) + "|" + e.Kind + "|" + e.Name + "|" + e.Text
}

// judge returns the state of a record read at the server time of the read
// (its durations are measured at it).
func judge(r pglease.Info, staleAfter time.Duration) (string, time.Duration) {
	threshold := staleAfter
	if threshold <= 0 {
		threshold = r.TTL / 2
	}
	switch {
	case r.Remaining <= 0:
		return stateExpired, threshold
	case r.HeartbeatAge > threshold:
		return stateStale, threshold
	}
	return stateHeld, threshold
}

// leasesOf judges every record of a read, and gives each its queue.
func leasesOf(recs []pglease.Info, queues map[string][]admin.Waiter, staleAfter time.Duration) []lease {
	out := make([]lease, len(recs))
	for i, r := range recs {
		out[i].Info = r
		out[i].State, out[i].StaleAfter = judge(r, staleAfter)
		out[i].Waiters = queues[queue.Of(r)]
	}
	return out
}

// sameQueue reports whether two reads show the same clients waiting, in
// the same order.
func sameQueue(a, b []admin.Waiter) bool {
	return slices.EqualFunc(a, b, func(x, y admin.Waiter) bool {
		return x.Owner == y.Owner && x.Since.Equal(y.Since) && x.Kind == y.Kind
	})
}

// diff returns the feed events between two reads of the table, prev and
// next. releasedHere reports whether the console itself force-released a
// name that disappeared.
func diff(prev, next []lease, prevExists, nextExists bool, at time.Time, releasedHere func(string) bool) []event {
	var out []event
	add := func(kind, name, text string) {
		out = append(out, event{At: at, Kind: kind, Name: name, Text: text})
	}
	if prevExists != nextExists {
		if nextExists {
			add("table", "", "the lease table was created")
		} else {
			add("table", "", "the lease table was dropped")
		}
	}
	old := make(map[string]lease, len(prev))
	for _, l := range prev {
		old[l.Name] = l
	}
	for _, l := range next {
		p, ok := old[l.Name]
		delete(old, l.Name)
		switch {
		case !ok && l.State == stateExpired:
			add("expired", l.Name, fmt.Sprintf("%s acquired by %s (token %d) and already expired", l.Name, l.Owner, l.Token))
		case !ok:
			add("acquired", l.Name, fmt.Sprintf("%s acquired by %s (token %d)", l.Name, l.Owner, l.Token))
		case p.Token != l.Token && p.State == stateExpired:
			add("acquired", l.Name, fmt.Sprintf("%s acquired by %s (token %d) after token %d expired", l.Name, l.Owner, l.Token, p.Token))
		case p.Token != l.Token:
			add("taken-over", l.Name, fmt.Sprintf("%s taken over by %s (token %d) from %s (token %d)", l.Name, l.Owner, l.Token, p.Owner, p.Token))
		case p.State != stateExpired && l.State == stateExpired:
			add("expired", l.Name, fmt.Sprintf("%s expired: %s (token %d) stopped renewing", l.Name, l.Owner, l.Token))
		case p.State == stateHeld && l.State == stateStale:
			add("stale", l.Name, fmt.Sprintf("%s is stale: no heartbeat from %s (token %d) for %s", l.Name, l.Owner, l.Token, human.Duration(l.HeartbeatAge)))
		case p.State == stateStale && l.State == stateHeld:
			add("renewed", l.Name, fmt.Sprintf("%s renewed again by %s (token %d)", l.Name, l.Owner, l.Token))
		}
	}
	for _, l := range prev { // in name order
		if _, gone := old[l.Name]; !gone {
			continue
		}
		switch {
		case releasedHere(l.Name):
			add("released", l.Name, fmt.Sprintf("%s force-released from this console (was %s, token %d)", l.Name, l.Owner, l.Token))
		case l.State == stateExpired:
			add("removed", l.Name, fmt.Sprintf("%s: expired row of token %d deleted", l.Name, l.Token))
		default:
			add("released", l.Name, fmt.Sprintf("%s released by %s (token %d)", l.Name, l.Owner, l.Token))
		}
	}
	return out
}

// sameLeases reports whether two reads show the same rows in the same
// states.
func sameLeases(a, b []lease) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.Owner != y.Owner || x.Token != y.Token || x.State != y.State ||
			!x.AcquiredAt.Equal(y.AcquiredAt) || !x.RenewedAt.Equal(y.RenewedAt) ||
			!x.ExpiresAt.Equal(y.ExpiresAt) || x.TTL != y.TTL || x.Metadata != y.Metadata ||
			!sameQueue(x.Waiters, y.Waiters) {
			return false
		}
	}
	return true
}

// counts returns how many leases are in each state.
func (s *snapshot) counts() (held, stale, expired int) {
	for _, l := range s.Leases {
		switch l.State {
		case stateHeld:
			held++
		case stateStale:
			stale++
		default:
			expired++
		}
	}
	return
}

// The JSON that the event stream sends to the page. Times are Unix
// milliseconds of the server's clock; tokens are strings (a 64-bit integer
// does not fit a JavaScript number).
type (
	leaseJSON struct {
		Name       string `json:"name"`
		Owner      string `json:"owner"`
		Token      string `json:"token"`
		State      string `json:"state"`
		Acquired   int64  `json:"acquired"`
		Renewed    int64  `json:"renewed"`
		Expires    int64  `json:"expires"`
		TTL        int64  `json:"ttl_ms"`
		StaleAfter int64  `json:"stale_after_ms"`
		Metadata   string `json:"metadata"`
		// Kind, Of, Size and Weight are pglease.Info's; KindLabel is what
		// the page shows of them beside the name, as pglease ls does
		// beside the state (human.Kind: "" for a plain lease or a
		// semaphore's slot, "shared", "later, 3 of 10").
		Kind      string `json:"kind"`
		Of        string `json:"of"`
		Size      int    `json:"size"`
		Weight    int    `json:"weight"`
		KindLabel string `json:"kind_label"`
		// Waiters: who waits, first in line first.
		Waiters []waiterJSON `json:"waiters"`
	}
	waiterJSON struct {
		Owner string `json:"owner"`
		Since int64  `json:"since"`
		Kind  string `json:"kind"` // admin.Waiter's
		// KindLabel is what the page shows of Kind (human.Kind: "" for
		// an exclusive wait).
		KindLabel string `json:"kind_label"`
	}
	eventJSON struct {
		At   int64  `json:"at"`
		Kind string `json:"kind"`
		Name string `json:"name"`
		Text string `json:"text"`
	}
	statusJSON struct {
		Text     string `json:"text"`
		Class    string `json:"class"`
		Exists   bool   `json:"exists"`
		Listener bool   `json:"listener"`
		Queues   bool   `json:"queues"` // who waits is known
	}
	snapshotJSON struct {
		Version uint64      `json:"version"`
		Now     int64       `json:"now"`
		Status  statusJSON  `json:"status"`
		Leases  []leaseJSON `json:"leases"`
		Feed    []eventJSON `json:"feed"`
	}
)

// marshal renders the snapshot for the page; now is the server time to
// report (the snapshot's read, advanced by the time since).
func (s *snapshot) marshal(table string, poll time.Duration) []byte {
	now := s.serverNowAt(time.Now())
	j := snapshotJSON{Version: s.Version, Now: now.UnixMilli(), Leases: []leaseJSON{}, Feed: []eventJSON{}}
	j.Status.Text, j.Status.Class = s.Status.describe(table, poll)
	j.Status.Exists, j.Status.Listener, j.Status.Queues = s.Status.TableExists, s.Status.ListenerUp, s.Status.QueuesOK
	for _, l := range s.Leases {
		lj := leaseJSON{Name: l.Name, Owner: l.Owner, Token: strconv.FormatInt(l.Token, 10),
			State: l.State, Acquired: l.AcquiredAt.UnixMilli(), Renewed: l.RenewedAt.UnixMilli(),
			Expires: l.ExpiresAt.UnixMilli(), TTL: l.TTL.Milliseconds(), StaleAfter: l.StaleAfter.Milliseconds(),
			Metadata: compactJSON(l.Metadata), Kind: l.Kind, Of: l.Of, Size: l.Size, Weight: l.Weight,
			KindLabel: human.Kind(l.Kind, l.Weight, l.Size), Waiters: []waiterJSON{}}
		for _, w := range l.Waiters {
			lj.Waiters = append(lj.Waiters, waiterJSON{Owner: w.Owner, Since: w.Since.UnixMilli(), Kind: w.Kind,
				KindLabel: human.Kind(w.Kind, 0, 0)})
		}
		j.Leases = append(j.Leases, lj)
	}
	for _, e := range s.Feed {
		j.Feed = append(j.Feed, eventJSON{At: e.At.UnixMilli(), Kind: e.Kind, Name: e.Name, Text: e.Text})
	}
	b, _ := json.Marshal(j) // plain types: cannot fail
	return b
}

// serverNowAt is the server's clock at local time t, as the snapshot's
// read and the time since tell it.
func (s *snapshot) serverNowAt(t time.Time) time.Time {
	if s.ReadAt.IsZero() {
		return t
	}
	return s.ServerNow.Add(t.Sub(s.ReadAt))
}

// describe is the connection state in words and as a CSS class.
func (st status) describe(table string, poll time.Duration) (text, class string) {
	switch {
	case st.Refused:
		return "cannot read " + table + ", retrying: " + st.Error, "down"
	case !st.DBUp && st.Error != "":
		return "database unreachable, retrying: " + st.Error, "down"
	case !st.DBUp:
		return "connecting to the database…", "down"
	case !st.ListenerUp:
		return fmt.Sprintf("live (listener reconnecting; polling every %s)", poll), "degraded"
	case !st.SequenceOK:
		return fmt.Sprintf("live (re-reading %s every %s: its token sequence is not readable)", table, poll), "degraded"
	}
	return "live", "up"
}

// compactJSON shows a metadata document on one line, its keys in their
// order and its strings as they are (no HTML escapes: the page escapes).
func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}
