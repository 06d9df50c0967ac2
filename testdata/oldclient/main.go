// Command oldclient is a client of an earlier pglease release, for
// TestOlderReleaseDuringAnUpgrade: the test copies this file into a tree of
// that release (git archive), builds it there and drives it through stdin,
// one command per line, each answered by one line on stdout:
//
//	try NAME [fast|slots=N]  TryAcquire        -> "ok TOKEN" | "held" | "error …"
//	all NAME…                TryAcquireAll     -> "ok TOKEN…" | "held" | "error …"
//	release NAME             releases what "try" or "all" got for NAME
//	alive NAME               whether the lease of NAME is still held -> "yes" | "no"
//
// Its leases have the TTL OLDCLIENT_TTL (default 30 s). It uses only API that every release since schema version 7 has.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pglease/pglease"
)

func main() {
	ctx := context.Background()
	c, err := pglease.Open(ctx, os.Getenv("OLDCLIENT_DSN"), pglease.Config{Table: os.Getenv("OLDCLIENT_TABLE")})
	if err != nil {
		fmt.Println("error", oneLine(err))
		os.Exit(1)
	}
	defer c.Close()
	ttl, err := time.ParseDuration(os.Getenv("OLDCLIENT_TTL"))
	if err != nil {
		ttl = 30 * time.Second
	}
	fmt.Println("ready")
	held := map[string]interface{ Release(context.Context) error }{}
	alive := map[string]context.Context{}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) < 2 {
			fmt.Println("error bad command")
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		switch f[0] {
		case "try":
			opts := []pglease.Option{pglease.WithTTL(ttl)}
			for _, o := range f[2:] {
				switch {
				case o == "fast":
					opts = append(opts, pglease.WithFastFailover())
				case strings.HasPrefix(o, "slots="):
					n, _ := strconv.Atoi(strings.TrimPrefix(o, "slots="))
					opts = append(opts, pglease.WithSlots(n))
				}
			}
			l, err := c.TryAcquire(cctx, f[1], opts...)
			if answer(err) {
				held[f[1]], alive[f[1]] = l, l.Context()
				fmt.Println("ok", l.Token())
			}
		case "all":
			s, err := c.TryAcquireAll(cctx, f[1:], pglease.WithTTL(ttl))
			if answer(err) {
				var toks []string
				for _, l := range s.Leases() {
					toks = append(toks, strconv.FormatInt(l.Token(), 10))
				}
				held[f[1]], alive[f[1]] = s, s.Context()
				fmt.Println("ok", strings.Join(toks, " "))
			}
		case "release":
			if l := held[f[1]]; l != nil {
				delete(held, f[1])
				if answer(l.Release(cctx)) {
					fmt.Println("ok")
				}
			} else {
				fmt.Println("error nothing held")
			}
		case "alive":
			if a := alive[f[1]]; a != nil && a.Err() == nil {
				fmt.Println("yes")
			} else {
				fmt.Println("no")
			}
		default:
			fmt.Println("error bad command")
		}
		cancel()
	}
}

// answer prints "held" or "error …" for a failed call and reports whether
// the call succeeded.
func answer(err error) bool {
	var he *pglease.HeldError
	switch {
	case err == nil:
		return true
	case errors.As(err, &he):
		fmt.Println("held")
	default:
		fmt.Println("error", oneLine(err))
	}
	return false
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }
