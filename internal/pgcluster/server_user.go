package pgcluster

import "os/exec"

// AsServerUser makes cmd run as the OS account PostgreSQL runs as: the
// current user, or "postgres" when running as root (PostgreSQL refuses to
// run as root). For tools that start PostgreSQL themselves, such as
// Patroni.
func AsServerUser(cmd *exec.Cmd) error {
	usr, err := lookupServerUser()
	if err != nil {
		return err
	}
	usr.apply(cmd)
	return nil
}

// ChownToServerUser hands path over to the account of [AsServerUser].
func ChownToServerUser(path string) error {
	usr, err := lookupServerUser()
	if err != nil {
		return err
	}
	return usr.chown(path)
}

// KillTree SIGKILLs pid and its direct children (the parent first stopped,
// so that it cannot fork meanwhile) and waits until they are gone: a
// crash of a postmaster and its backends, or of any such process tree.
func KillTree(pid int) error {
	c := &Cluster{logf: func(string, ...any) {}}
	return c.killPids(killTree(pid))
}

// Alive reports whether pid names a live process (not a zombie).
func Alive(pid int) bool { return alive(pid) }
