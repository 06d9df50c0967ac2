package main

import (
	"fmt"
	"slices"
	"strings"
)

// The contention figures ("Contention at scale"), gathered
// from S2, S3 and S6 into one table laid out like the issue's, and their
// targets.

// contentionPeers are the columns of the contention table.
var contentionPeers = []string{"pglease", "pglease-ff", "pglock", "ref50", "advisory"}

// s2Any returns the S2 row of peer id in a mode, failed or not, or nil.
func (r *report) s2Any(id, label string) *s2Row {
	for i := range r.s2 {
		if r.s2[i].peer.id == id && r.s2[i].label == label {
			return &r.s2[i]
		}
	}
	return nil
}

// s6Of returns the S6 row of peer id, failed or not, or nil.
func (r *report) s6Of(id string) *s6Row {
	for i := range r.s6 {
		if r.s6[i].peer.id == id {
			return &r.s6[i]
		}
	}
	return nil
}

// perInterval is the statements of d per renewal interval of x.
func (x *s6Row) perInterval(d delta) float64 {
	return float64(d.stmts) / (d.dur.Seconds() / x.interval.Seconds())
}

// plural formats n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// thousands formats n with a comma between groups of three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func (r *report) hasContention() bool {
	for _, id := range contentionPeers {
		if r.s2Any(id, "") != nil || r.s2Any(id, labelClients) != nil || r.s3Row(id, 8, true) != nil || r.s6Of(id) != nil {
			return true
		}
	}
	return false
}

func (r *report) mdContention(w func(string, ...any)) {
	if !r.hasContention() {
		return
	}
	w("## Contention at scale\n\n")
	w("The contention cases side by side, from S2, S3 and S6 of this run: one name contended by 16 separate clients (a client and pool each, as 16 processes) and by 16 goroutines of one client, both looping acquire → release for %v, with Jain's fairness index of the per-goroutine counts; the hand-off from a release to the next of 8 waiters when the holder and the waiters are goroutines of one client (p50, at most %d samples in %v; a case in which no waiter took over within that time says so); and the time one client takes to acquire %s leases on distinct names with 16 goroutines, with the renewal statements per interval that holding them costs. *upsert reference, 50 ms polling* (`ref50`) is the single-statement upsert reference with a blocked lock polling every 50 ms (each waiter at a random phase) instead of every 1–3 ms, as a lease table with an ordinary poll interval would; it runs in S2 and S3 only. – : not run.\n\n",
		r.cfg.s2Dur, r.cfg.s3Samples, r.cfg.s3Cap, thousands(r.cfg.s6N))
	w("| case |")
	for _, id := range contentionPeers {
		w(" %s |", peerByID(id).title)
	}
	w("\n|---|%s\n", strings.Repeat("---:|", len(contentionPeers)))
	// A row for each scenario that ran.
	row := func(title string, cell func(id string) string) {
		var cells []string
		for _, id := range contentionPeers {
			cells = append(cells, cell(id))
		}
		if !slices.ContainsFunc(cells, func(c string) bool { return c != "–" }) {
			return
		}
		w("| %s |", title)
		for _, c := range cells {
			w(" %s |", c)
		}
		w("\n")
	}
	s2Cell := func(label string) func(string) string {
		return func(id string) string {
			x := r.s2Any(id, label)
			switch {
			case x == nil:
				return "–"
			case x.err != nil:
				return "error (see S2)"
			}
			return fmt.Sprintf("%s (Jain %.2f)", num(x.acqPerSec), x.jain)
		}
	}
	row("16 separate clients, one name, acquire → release loop: acquisitions/s", s2Cell(labelClients))
	row("16 goroutines of one client, same loop: acquisitions/s", s2Cell(""))
	row("hand-off to the next of 8 waiters, all in one client: p50", func(id string) string {
		x := r.s3Row(id, 8, true)
		switch {
		case x == nil:
			return "–"
		case len(x.lat) == 0 && x.err != nil:
			return "error (see S3)"
		case len(x.lat) == 0:
			return noHandoff(x)
		}
		return fmt.Sprintf("%s ms (p99 %s ms, n=%d)", ms(x.lat.pct(50)), ms(x.lat.pct(99)), len(x.lat))
	})
	row(thousands(r.cfg.s6N)+" leases acquired by one client", func(id string) string {
		x := r.s6Of(id)
		switch {
		case x == nil:
			return "–"
		case x.err != nil:
			return "error (see S6)"
		}
		n := ""
		if x.n != r.cfg.s6N {
			n = fmt.Sprintf(" for %s leases", thousands(x.n))
		}
		return fmt.Sprintf("%s%s; %s renewal statements per %v", secs(x.acquireTime), n, num(x.perInterval(x.d)), x.interval)
	})
	row("overlapping critical sections (every S2 and S3 row)", func(id string) string {
		n, rows := r.overlaps(id)
		if rows == 0 {
			return "–"
		}
		return fmt.Sprint(n)
	})
	w("\n")
}

// overlaps sums the overlapping critical sections of peer id's S2 and S3
// rows that ran (not failed before they measured anything).
func (r *report) overlaps(id string) (n int64, rows int) {
	for _, x := range r.s2 {
		if x.peer.id == id && x.err == nil {
			n, rows = n+x.violations, rows+1
		}
	}
	for _, x := range r.s3 {
		if x.peer.id == id && (x.err == nil || len(x.lat) > 0 || x.violations > 0) {
			n, rows = n+x.violations, rows+1
		}
	}
	return n, rows
}

// mdContentionTargets writes the contention targets, (a)–(d), as rows of
// the targets table.
func (r *report) mdContentionTargets(w func(string, ...any)) {
	// (a) 16 separate clients on one name.
	if pg := r.s2Of("pglease", labelClients); pg != nil {
		for _, t := range []struct {
			id, what string
			factor   float64
		}{
			{"pglock", "pglease ≥ 2× pglock", 2},
			{"ref50", "pglease ≥ upsert reference with 50 ms polling", 1},
		} {
			if o := r.s2Of(t.id, labelClients); o != nil {
				x := pg.acqPerSec / o.acqPerSec
				w("| (a) S2 16 separate clients: %s acquisitions/s | %s/s vs %s/s = %.2f× (fairness %.2f vs %.2f) | %s |\n", t.what,
					num(pg.acqPerSec), num(o.acqPerSec), x, pg.jain, o.jain, verdict(x >= t.factor))
			}
		}
		if ff := r.s2Of("pglease-ff", labelClients); ff != nil {
			x := ff.acqPerSec / pg.acqPerSec
			w("| (a) S2 16 separate clients: FastFailover ≥ 0.8× pglease acquisitions/s | %s/s vs %s/s = %.2f× (fairness %.2f vs %.2f) | %s |\n",
				num(ff.acqPerSec), num(pg.acqPerSec), x, ff.jain, pg.jain, verdict(x >= 0.8))
		}
	}
	// (b) hand-off among goroutines of one client.
	if pg, ff := r.s3Row("pglease", 8, true), r.s3Row("pglease-ff", 8, true); pg != nil && ff != nil {
		const what = "| (b) S3 8 waiters in one client: FastFailover hand-off p50 ≤ 1.5× pglease's |"
		switch {
		case len(pg.lat) == 0:
			w("%s pglease: %s | **not measured** |\n", what, noHandoff(pg))
		case len(ff.lat) == 0:
			w("%s FastFailover: %s; pglease p50 %s ms (n=%d) | %s |\n", what, noHandoff(ff), ms(pg.lat.pct(50)), len(pg.lat), verdict(false))
		default:
			x := float64(ff.lat.pct(50)) / float64(pg.lat.pct(50))
			w("%s p50 %s ms vs %s ms = %.2f× (p99 %s vs %s ms; n=%d, %d) | %s |\n", what, ms(ff.lat.pct(50)), ms(pg.lat.pct(50)), x,
				ms(ff.lat.pct(99)), ms(pg.lat.pct(99)), len(ff.lat), len(pg.lat), verdict(x <= 1.5))
		}
	}
	// (c) many fast-failover leases in one client.
	if pg, ff := r.s6Of("pglease"), r.s6Of("pglease-ff"); pg != nil && ff != nil && pg.err == nil && ff.err == nil && pg.n > 0 && ff.n > 0 {
		// Per lease, should the two ever run with different counts.
		x := (ff.acquireTime.Seconds() * float64(pg.n)) / (pg.acquireTime.Seconds() * float64(ff.n))
		n := thousands(pg.n) + " leases"
		if ff.n != pg.n {
			n = fmt.Sprintf("%s vs %s leases, compared per lease", thousands(ff.n), thousands(pg.n))
		}
		w("| (c) S6: FastFailover acquires %s leases in one client in ≤ 2× pglease's time | %s vs %s for %s = %.2f×; renewal statements per %v: %s vs %s | %s |\n",
			thousands(r.cfg.s6N), secs(ff.acquireTime), secs(pg.acquireTime), n, x, pg.interval, num(ff.perInterval(ff.d)), num(pg.perInterval(pg.d)), verdict(x <= 2))
	}
	// (d) no overlapping critical sections.
	var pgN, otherN int64
	var pgRows, otherRows int
	var others []string
	for _, p := range peers {
		n, rows := r.overlaps(p.id)
		if p.id == "pglease" || p.id == "pglease-ff" {
			pgN, pgRows = pgN+n, pgRows+rows
			continue
		}
		otherN, otherRows = otherN+n, otherRows+rows
		if n > 0 {
			others = append(others, fmt.Sprintf("%s %d", p.title, n))
		}
	}
	if pgRows > 0 {
		fig := fmt.Sprintf("%d in %s of pglease and FastFailover", pgN, plural(pgRows, "row"))
		if otherRows > 0 {
			fig += fmt.Sprintf("; other peers: %d in %s", otherN, plural(otherRows, "row"))
			if len(others) > 0 {
				fig += " (" + strings.Join(others, ", ") + ")"
			}
		}
		w("| (d) S2, S3: no overlapping critical sections | %s | %s |\n", fig, verdict(pgN == 0))
	}
}
