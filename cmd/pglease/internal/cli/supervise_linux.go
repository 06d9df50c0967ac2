package cli

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// becomeSubreaper makes orphaned descendants re-parent to this process
// instead of init, so the supervisor can reap them and tell when the
// command's job is really gone.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// setPdeathsig makes the kernel SIGKILL a demo worker when the demo dies.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// clockNow reads the clock the supervisor enforces deadlines by, in
// nanoseconds: CLOCK_BOOTTIME, the same in every process and counting
// the time a machine was suspended (the lease's server-side expiry does).
func clockNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("pglease: clock_gettime(CLOCK_BOOTTIME): " + err.Error())
	}
	return ts.Nano()
}

// procStat is a process as /proc/PID/stat describes it.
type procStat struct {
	pid, ppid, pgrp int
	zombie          bool
}

// processes lists every process from /proc; ok is false when /proc cannot
// tell.
func processes() (ps []procStat, ok bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, false
	}
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			return nil, false
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 {
			return nil, false
		}
		p := procStat{zombie: f[0][0] == 'Z' || f[0][0] == 'X'}
		p.pid, _ = strconv.Atoi(n)
		p.ppid, _ = strconv.Atoi(string(f[1]))
		p.pgrp, _ = strconv.Atoi(string(f[2]))
		ps = append(ps, p)
	}
	return ps, true
}

// groupRunning reports whether a member of the process group is not a
// zombie, from /proc; known is false when /proc cannot tell.
func groupRunning(pgid int) (running, known bool) {
	ps, ok := processes()
	if !ok {
		return false, false
	}
	for _, p := range ps {
		if p.pgrp == pgid && !p.zombie {
			return true, true
		}
	}
	return false, true
}

// escaped lists the live descendants of this process outside the process
// group pgid: members of the job that left its group (setsid, setpgid, a
// double fork whose middle process exited and left the grandchild to this
// subreaper).
func escaped(pgid int) []int {
	ps, ok := processes()
	if !ok {
		return nil
	}
	self := os.Getpid()
	parent := make(map[int]int, len(ps))
	for _, p := range ps {
		parent[p.pid] = p.ppid
	}
	// descends memoizes whether a pid descends from self.
	descends := map[int]bool{self: true, 0: false, 1: false}
	var from func(pid int, depth int) bool
	from = func(pid int, depth int) bool {
		if v, ok := descends[pid]; ok {
			return v
		}
		pp, ok := parent[pid]
		if !ok || depth > len(ps) { // gone meanwhile, or a loop in a torn read
			return false
		}
		v := from(pp, depth+1)
		descends[pid] = v
		return v
	}
	var out []int
	for _, p := range ps {
		if p.pid != self && p.pgrp != pgid && !p.zombie && from(p.pid, 0) {
			out = append(out, p.pid)
		}
	}
	return out
}
