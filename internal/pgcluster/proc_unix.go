//go:build unix

package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// serverUser is the OS account the PostgreSQL processes run as. The zero
// value means "the current user".
type serverUser struct {
	uid, gid uint32
	set      bool
}

// lookupServerUser returns the account to run the server as: the current
// user, or the "postgres" account when running as root (PostgreSQL refuses
// to run as root).
func lookupServerUser() (serverUser, error) {
	if os.Geteuid() != 0 {
		return serverUser{}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return serverUser{}, fmt.Errorf("pglease: running as root and PostgreSQL refuses to run as root, "+
			"but OS user \"postgres\" was not found: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return serverUser{}, fmt.Errorf("pglease: bad uid/gid for user postgres: %w", err)
	}
	return serverUser{uid: uint32(uid), gid: uint32(gid), set: true}, nil
}

// apply makes cmd run as the server user.
func (u serverUser) apply(cmd *exec.Cmd) {
	if u.set {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid},
		}
	}
}

// chown hands path over to the server user.
func (u serverUser) chown(path string) error {
	if !u.set {
		return nil
	}
	return os.Lchown(path, int(u.uid), int(u.gid))
}

// alive reports whether pid names a live (non-zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	state, _, ok := procStat(pid)
	if ok && (state == "Z" || state == "X") {
		return false
	}
	return true
}

// exists reports whether pid names any process, including a zombie.
func exists(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// procStat returns the state and parent pid of pid from /proc, if available.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}

// children lists the direct children of pid (empty without /proc).
func children(pid int) []int {
	ents, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(filepath.Base(e))
		if err != nil {
			continue
		}
		if _, pp, ok := procStat(p); ok && pp == pid {
			out = append(out, p)
		}
	}
	return out
}

// killTree SIGKILLs pid and its direct children. The parent is stopped
// first so it cannot fork while its children are collected. It returns the
// pids signalled.
func killTree(pid int) []int {
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	pids := append([]int{pid}, children(pid)...)
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return pids
}
