package pglease

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"unicode/utf8"
)

// fittedSuffix is how a name FitName made ends: "~" and 32 hex digits.
var fittedSuffix = regexp.MustCompile(`~[0-9a-f]{32}$`)

// FitName returns a lease name for key, a string by which another tool
// names what it locks (a gocron job's name, a River job's key), for an
// adapter whose keys may be any string the tool accepts. Every process
// computes the same name for the same arguments.
//
// The name is prefix+key itself when that is a valid lease name (see
// [Config.Plan]: 1 to 255 bytes of UTF-8 without NUL, not ending in "#"
// and digits, the form of slot names) of at most maxBytes bytes (255 when
// maxBytes is 0 or more) that does not end as a fitted name does.
// Otherwise it is prefix, as much of the beginning of key as fits (its
// invalid UTF-8 and NUL bytes left out), "~" and the first 32 hex digits
// of key's SHA-256: "gocron:shard#1~3b1f…". Distinct keys get distinct
// names (barring a collision of SHA-256's first 128 bits), and a key
// whose name was valid keeps it, so that replicas of a release that used
// keys verbatim and of this one take the same leases.
//
// maxBytes leaves room for what the name's rows add: a semaphore of n
// slots adds "#" and up to len(strconv.Itoa(n-1)) digits. prefix must be
// valid UTF-8 without NUL, at most maxBytes-33 bytes; FitName panics
// otherwise, a mistake of the adapter's own code.
func FitName(prefix, key string, maxBytes int) string {
	if maxBytes <= 0 || maxBytes > maxNameBytes {
		maxBytes = maxNameBytes
	}
	room := maxBytes - len(prefix) - 1 - 32
	if room < 0 || !utf8.ValidString(prefix) || strings.ContainsRune(prefix, 0) {
		panic("pglease: FitName: the prefix " + prefix + " must be valid UTF-8 without NUL, at most maxBytes-33 bytes")
	}
	name := prefix + key
	if len(name) <= maxBytes && checkName(name) == nil && !fittedSuffix.MatchString(name) {
		return name
	}
	var b strings.Builder
	b.WriteString(prefix)
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		i += size
		if (r == utf8.RuneError && size == 1) || r == 0 {
			continue
		}
		if size > room {
			break
		}
		room -= size
		b.WriteRune(r)
	}
	sum := sha256.Sum256([]byte(key))
	b.WriteString("~" + hex.EncodeToString(sum[:16]))
	return b.String()
}
