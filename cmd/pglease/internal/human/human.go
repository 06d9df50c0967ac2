// Package human formats values for people, the same way in every command
// of the CLI and in the console.
package human

import (
	"fmt"
	"time"
)

// Duration formats d briefly: 850ms, 12.3s, 4m05s, 2h03m, 3d04h (negative
// with a leading "-").
func Duration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		s = fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if neg {
		return "-" + s
	}
	return s
}

// Kind is what pglease ls and the console say of a lease row's kind (or of
// a wait's, whose size is 0), beside its state or name: "" for a plain
// lease and for a semaphore's slot (each slot is a lease of its own, and
// its name says whose), the kind's word otherwise ("shared", or that of a
// kind a later version adds, as the table records it), followed by the
// units of the kind's size the row takes when the kind has a size
// ("later, 3 of 10"). It knows no kind but plain and semaphore, so that a
// new kind shows without a change here.
func Kind(kind string, weight, size int) string {
	switch {
	case kind == "" || kind == "plain" || kind == "semaphore":
		return ""
	case size > 0:
		return fmt.Sprintf("%s, %d of %d", kind, weight, size)
	}
	return kind
}
