//go:build !unix

package pgcluster

import (
	"os"
	"os/exec"
)

type serverUser struct{}

func lookupServerUser() (serverUser, error) { return serverUser{}, nil }

func (serverUser) apply(*exec.Cmd) {}

func (serverUser) chown(string) error { return nil }

func alive(pid int) bool {
	_, err := os.FindProcess(pid)
	return err == nil
}

func exists(pid int) bool { return alive(pid) }

func killTree(pid int) []int {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
	return []int{pid}
}
