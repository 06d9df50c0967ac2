// Package pgleasecron runs scheduled jobs on a fleet of replicas so that
// every tick of a job runs once, on one replica, however many replicas run
// the same scheduler and however their clocks disagree.
//
// # Model
//
// A job has a name, a schedule (a cron expression or an interval, see
// [Parse]) and a function. Every replica registers the same jobs with a
// [Scheduler] on the same lease table and calls [Scheduler.Run]. A tick is
// one scheduled instant of one job; its identity is (job, instant). The
// database keeps, per job, the last tick claimed (the jobs table, named
// after the lease table with the suffix _jobs) and a bounded history of
// runs (suffix _runs), one row per claimed tick.
//
// A tick is claimed by one statement that moves the job's last tick
// forward to it, only if it is later than the last tick and due by the
// server's clock. Replicas that race for a tick serialize on the job's row
// and only the first one moves it: a tick is claimed at most once, and it
// is never claimed before its instant by the server's clock. Each replica
// estimates the server's clock from its replies and sleeps until the next
// tick by that estimate, so a replica whose clock runs ahead waits for the
// server and one whose clock runs behind is not late; its own clock only
// decides how long it sleeps.
//
// A tick runs while its runner holds the job's lease (named "cron:" and
// the job's name) with the usual guarantees of package pglease: the
// function's context is cancelled before the lease could be granted to
// anyone else, and [TickOf] gives the fencing token. The runner takes the
// lease first and then claims the tick, recording its token in the tick's
// run row; the run row's end (outcome, error) is written under that token,
// so a runner that lost its row to another replica writes nothing. The
// claim itself is fenced by the lease: it is made only while the job's
// lease row carries the claimer's token, unexpired by the server's clock,
// so a replica that stalled past its lease's end between taking the lease
// and claiming claims nothing when it resumes. The same fence guards
// taking a dead runner's run over under [Retry]. A claim whose reply is
// lost is asked after (once the claims the server still runs have ended);
// if it was made, the claimer runs the tick.
//
// The job's lease has one holder at a time: [Scheduler.Add] refuses lease
// options that would let several replicas hold it at once
// (pglease.WithSlots) or keep it held after a run (pglease.WithMinHold);
// see [LeaseOptions].
//
// # Policies
//
// Each job has three explicit policies (see [Option]):
//
//   - Missed ticks ([OnMissed]): ticks that came while no replica ran the
//     job (every replica down, or a run that outlasted several ticks). A
//     tick is on time when it is the only tick due and at most the
//     tolerance late ([Config.Tolerance], default 1 minute); otherwise the
//     due ticks are missed ticks. [RunOnce] (the default) runs the latest of
//     them once, [Skip] runs none and waits for the next tick, [RunAll] runs
//     each of the latest n of them in order. The ticks not run are recorded
//     in one history row (status "missed", or the count of the run that
//     stands for them).
//   - Overlap ([OnOverlap]): a tick that comes while the job's previous run
//     is still going. [SkipOverlap] (the default) records it as skipped;
//     [QueueOverlap] makes the tick wait for the lease and run after the
//     previous run (each replica queues at most one tick of a job; further
//     ticks become missed ticks).
//   - A runner that dies, or whose run is lost with its lease
//     ([OnAbandoned]): its run row says "running" while its lease is gone,
//     or "lost". [Leave] (the default) records a dead runner's run as
//     abandoned and leaves a lost one lost: the tick ran at most once.
//     [Retry] runs the tick again on another replica once the first
//     runner's lease has ended on the server (at most the attempts it is
//     given in all): the tick runs at least once, perhaps partly twice.
//     Each run is judged by its own lease row (by its token), never by the
//     lease the looking replica holds.
//
// # Failure model
//
// What the scheduler assumes and guarantees, on top of package pglease's
// failure model:
//
//   - At most once per tick: a tick is claimed at most once (the claim is one
//     statement on one row), and a claimed tick is run by its claimer only.
//     Only the [Retry] policy runs a tick again, and only after its first
//     runner's lease ended, so two runs of one tick never overlap.
//   - No lost tick while a replica lives: each live replica wakes for every
//     tick (by the server's clock) and tries to claim it; one replica
//     suffices. A replica that crashes before claiming loses nothing another
//     replica does not pick up. A replica that crashes after taking the
//     job's lease but before claiming delays the tick until the lease ends
//     (at once for a session-bound lease, see pglease.WithFastFailover;
//     after its TTL otherwise); the tick is then late and the missed-tick
//     policy decides.
//   - A runner that crashes while running leaves its run row "running"; the
//     first replica to hold the job's lease after it (at the next tick, or
//     sooner when it sees the dead runner's lease row end) applies the
//     abandoned-run policy. A runner partitioned from the database loses its
//     lease as package pglease describes: its function's context is
//     cancelled before anyone else could run the job, and its run ends as
//     "lost" ([Retry] runs it again).
//   - A replica that stalls (a pause, a cut connection) between taking the
//     job's lease and claiming a tick, past the lease's end, claims
//     nothing: the claim checks the lease on the server's clock. The tick
//     goes to the next holder. A claim whose reply is lost after it
//     committed is found again and run. When the asking fails too, or the
//     claim reaches the server only after it, a claim that was made is
//     dealt with as a dead runner's run (abandoned, or run again by Retry).
//   - Clocks: replicas' clocks may be wrong by any amount; only the server's
//     clock decides when a tick is due. If the server's clock jumps, ticks
//     follow it: a jump forward makes the skipped ticks missed ticks, a jump
//     back delays the next tick.
//   - The history keeps the newest runs of each job ([Config.History], 100 by
//     default); rows still running are never dropped.
//   - Every replica must register a job with the same schedule. A replica
//     with another schedule for the same name claims the ticks of its own
//     schedule: ticks are still claimed in increasing order and at most
//     once, but the job then runs on the union of the schedules.
//
// # robfig/cron
//
// A service that keeps robfig/cron's scheduler wraps its job with
// [Scheduler.Wrap] instead of calling Add and Run: each replica's Cron fires
// the job, and the firing handles the job's due tick exactly as a replica's
// own loop would, with the guarantees above. Firings are only a prompt: a
// replica whose Cron fires before the server's clock reaches the tick waits
// for it (by up to half the schedule's period), and one that fires after
// another replica claimed the tick skips it.
package pgleasecron
