package pgcluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrNoBinaries is returned (wrapped) by FindBinaries when the PostgreSQL
// server binaries cannot be located.
var ErrNoBinaries = errors.New("pglease: PostgreSQL server binaries (initdb, pg_ctl) not found; " +
	"install them (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) or set PGLEASE_PG_BIN")

// requiredBinaries must all be present in a candidate directory.
var requiredBinaries = []string{"initdb", "pg_ctl", "postgres"}

// FindBinaries returns the directory holding the PostgreSQL server binaries
// (initdb, pg_ctl, postgres). It consults, in order: $PGLEASE_PG_BIN,
// `pg_config --bindir`, the highest version under /usr/lib/postgresql/*/bin,
// and finally $PATH.
func FindBinaries() (dir string, err error) {
	if d := os.Getenv("PGLEASE_PG_BIN"); d != "" {
		if hasBinaries(d) {
			return d, nil
		}
		return "", errors.New("pglease: PGLEASE_PG_BIN=" + d + " does not contain initdb, pg_ctl and postgres")
	}
	if pc, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(pc, "--bindir").Output(); err == nil {
			if d := strings.TrimSpace(string(out)); hasBinaries(d) {
				return d, nil
			}
		}
	}
	if d := debianBinDir(); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if d := filepath.Dir(p); hasBinaries(d) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

// debianBinDir returns the highest-versioned /usr/lib/postgresql/*/bin that
// holds the server binaries, or "".
func debianBinDir() string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(p string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(p)), 64)
		return v
	}
	sort.Slice(matches, func(i, j int) bool { return version(matches[i]) > version(matches[j]) })
	for _, d := range matches {
		if hasBinaries(d) {
			return d
		}
	}
	return ""
}

func hasBinaries(dir string) bool {
	for _, b := range requiredBinaries {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}
