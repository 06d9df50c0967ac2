//go:build unix

package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

// chromium finds a Chromium or Chrome binary. Without one the browser test
// is skipped, unless $CI or $PGLEASE_BROWSER is set: then it fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium for the browser test of pglease serve: install it (Debian, Ubuntu: apt-get install chromium)"
	if os.Getenv("CI") != "" || os.Getenv("PGLEASE_BROWSER") != "" {
		t.Fatal(msg + " ($CI or $PGLEASE_BROWSER is set, so the test must run)")
	}
	t.Skip(msg)
	return ""
}

// browser is a headless Chromium tab.
type browser struct {
	t       *testing.T
	ctx     context.Context
	dialogs atomic.Int32 // JavaScript dialogs that opened (alert, confirm)
	accept  atomic.Bool  // accept them (else dismiss)
}

// newBrowser starts a headless Chromium with the default options and
// extra.
func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	opts = append(opts, extra...)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting Chromium: %v", err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			b.dialogs.Add(1)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: b.accept.Load()})
		}
	}()
	return b
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, js string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// observe polls the DOM every 20ms until the expression js is true, and
// returns when it first was.
func (b *browser) observe(what, js string) time.Time {
	b.t.Helper()
	deadline := time.Now().Add(pgtest.Patience)
	for {
		if eval[bool](b, js) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the page did not show %s within %s", what, pgtest.Patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// rowState is an expression: the state the page shows for the lease name
// ("" without a row).
func rowState(name string) string {
	return `(function () {
		var tr = Array.prototype.find.call(document.querySelectorAll('#rows tr'), function (r) { return r.getAttribute('data-name') === ` + js(name) + `; });
		return tr ? tr.querySelector('.badge').textContent : '';
	})()`
}

// rowCell is an expression: the text of the cell (a selector within the
// row) of lease name's row ("" without a row).
func rowCell(name, cell string) string {
	return `(function () {
		var tr = Array.prototype.find.call(document.querySelectorAll('#rows tr'), function (r) { return r.getAttribute('data-name') === ` + js(name) + `; });
		return tr ? tr.querySelector(` + js(cell) + `).textContent : '';
	})()`
}

// The console in a real browser: each change shows within a second of
// committing, a hostile name is text, and a read-only console offers no
// way to release.
func TestServeInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	env, table := tableEnv(t)
	if code, _, stderr := run(t, env, "migrate", "--table", table); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), table)
	srv := start(t, env, "serve", "--listen", "127.0.0.1:0", "--table", table, "--stale-after", "3s")
	url := serveURL(t, srv)
	b.do("opening the console", chromedp.Navigate(url))
	b.observe("the event stream connected", `document.getElementById('console').hasAttribute('data-version')`)

	// A lease that renews every 20s: stale 3s after its acquisition.
	start(t, env, "run", "nightly-report", "--table", table, "--ttl", "60s", "--owner", "batch-7f3a", "--", "sleep", "300")
	// Acquisition: from the row's acquired_at (the server's clock; the same
	// host) to the DOM.
	start(t, env, "run", "deploy-lock", "--table", table, "--ttl", "6s", "--owner", "ci-runner-2", "--", "sleep", "300")
	seen := b.observe("deploy-lock held", rowState("deploy-lock")+` === 'held'`)
	acquired := pgtest.Value[time.Time](t, `SELECT "acquired_at" FROM `+leases.Name()+` WHERE "name" = 'deploy-lock'`)
	checkLatency(t, "acquisition", seen.Sub(acquired))

	// Release: from the start of a force-release (by a client of this
	// process: the time a pglease command takes to start is not the
	// console's) to the DOM.
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	operator, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table, Owner: "browser-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer operator.Close()
	began := time.Now()
	if _, err := admin.ForceRelease(ctx, operator, "deploy-lock"); err != nil {
		t.Fatalf("release: %v", err)
	}
	returned := time.Now()
	seen = b.observe("deploy-lock gone", rowState("deploy-lock")+` === ''`)
	t.Logf("release: %s after ForceRelease returned", seen.Sub(returned))
	checkLatency(t, "release", seen.Sub(began))

	// Expiry: a holder with a TTL of 1s, SIGKILLed; from the row's
	// expires_at to the DOM.
	crashed := start(t, env, "run", "crashed-worker", "--table", table, "--ttl", "1s", "--owner", "worker-3", "--", "sleep", "300")
	b.observe("crashed-worker held", rowState("crashed-worker")+` === 'held'`)
	if err := crashed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	seen = b.observe("crashed-worker expired", rowState("crashed-worker")+` === 'expired'`)
	expires := leases.ExpiresAt("crashed-worker")
	checkLatency(t, "expiry", seen.Sub(expires))

	// A row of a kind the console does not know (one a later version may
	// add), and a wait for its name: shown as pglease ls shows them, by
	// the script and by the server's render. Written without a token of the
	// sequence, the row is read with the hostile name's acquisition.
	leases.InsertOfKind("q#0", "later-holder", 1<<40, time.Minute, "later", "q", 10, 3)
	leases.QueueShared("q", "q-reader")

	// A hostile name is text, in the live update and in the server's render.
	const hostile = `<script>alert(1)</script>`
	start(t, env, "run", hostile, "--table", table, "--ttl", "6s", "--owner", `<img src=x onerror=alert(2)>`, "--", "sleep", "300")
	for _, how := range []string{"live", "reloaded"} {
		if how == "reloaded" {
			b.do("reloading", chromedp.Reload())
		}
		b.observe(how+": the hostile name", rowState(hostile)+` !== ''`)
		text := eval[string](b, `Array.prototype.map.call(document.querySelectorAll('#rows th.name'), function (th) { return th.textContent; }).join('\n')`)
		if !bytes.Contains([]byte(text), []byte(hostile)) {
			t.Errorf("%s: names shown %q, want %q among them", how, text, hostile)
		}
		if n := eval[int](b, `document.scripts.length + document.querySelectorAll('#rows script, #rows img, #feed script, #feed img').length`); n != 1 {
			t.Errorf("%s: %d script elements and injected elements, want 1 (console.js)", how, n)
		}
		b.observe(how+": the later kind's row and its waiter", rowCell("q#0", "th.name")+` === 'q#0 (later, 3 of 10)' && `+
			rowCell("q#0", "td.queue")+`.indexOf('q-reader ') === 0 && `+rowCell("q#0", "td.queue")+`.indexOf(' (later)') > 0`)
	}
	if n := b.dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}

	// Read-only: no button, and a POST from the page's own origin is refused.
	if n := eval[int](b, `document.querySelectorAll('button, form, input').length`); n != 0 {
		t.Errorf("the read-only page has %d buttons, forms or inputs", n)
	}
	status := eval[int](b, `fetch('release', {method: 'POST', body: new URLSearchParams({name: 'nightly-report', confirm: 'yes', csrf: 'x'})}).then(function (r) { return r.status; })`,
		chromedp.EvalAwaitPromise)
	if status != 404 && status != 405 && status != 403 {
		t.Errorf("POST /release from the page: %d, want 404, 405 or 403", status)
	}
	if _, ok := leases.Get("nightly-report"); !ok {
		t.Error("nightly-report was released")
	}

	// Screenshots with held, stale and expired rows.
	b.observe("nightly-report stale", rowState("nightly-report")+` === 'stale'`)
	b.observe(hostile+" held", rowState(hostile)+` === 'held'`)
	for _, v := range []struct {
		name          string
		width, height int64
		mobile        bool
	}{{"phone", 390, 844, true}, {"desktop", 1280, 720, false}} {
		opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
		if v.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		b.do("resizing", chromedp.EmulateViewport(v.width, v.height, opts...))
		if v.mobile && eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
			t.Errorf("phone: the page is %d px wide in a %d px viewport", eval[int](b, `document.documentElement.scrollWidth`), v.width)
		}
		shot, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%s screenshot: %v", v.name, err)
		}
		img, err := png.Decode(bytes.NewReader(shot))
		if err != nil || int64(img.Bounds().Dx()) != v.width {
			t.Fatalf("%s screenshot: %v, %v wide", v.name, err, img.Bounds().Dx())
		}
		// PGLEASE_SCREENSHOT=1 regenerates docs/console.png (and leaves the
		// phone's in the temporary directory, to look at).
		path := filepath.Join(t.TempDir(), v.name+".png")
		if os.Getenv("PGLEASE_SCREENSHOT") != "" {
			path = filepath.Join(os.TempDir(), "pglease-console-phone.png")
			if v.name == "desktop" {
				path = filepath.Join("..", "..", "..", "..", "docs", "console.png")
			}
		}
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s screenshot: %s (%dx%d)", v.name, path, img.Bounds().Dx(), img.Bounds().Dy())
	}
	b.do("resizing", chromedp.EmulateViewport(1280, 900))
	checkReleaseButton(t, b, env, table, leases)
}

// With --allow-release the page has a force-release button per lease,
// usable by keyboard, behind a confirmation.
func checkReleaseButton(t *testing.T, b *browser, env []string, table string, leases *pgtest.Leases) {
	t.Helper()
	srv := start(t, env, "serve", "--listen", "127.0.0.1:0", "--table", table, "--allow-release")
	b.do("opening the console with --allow-release", chromedp.Navigate(serveURL(t, srv)))
	b.observe("the event stream connected", `document.getElementById('console').hasAttribute('data-version')`)
	button := chromedp.CSS(`tr[data-name="nightly-report"] button.release`)
	if n := eval[int](b, `document.querySelectorAll('#rows button.release').length`); n != eval[int](b, `document.querySelectorAll('#rows tr').length`) || n == 0 {
		t.Errorf("%d release buttons for %d rows", n, eval[int](b, `document.querySelectorAll('#rows tr').length`))
	}
	press := func() {
		before := b.dialogs.Load()
		b.do("pressing Enter on the release button", chromedp.Focus(button), chromedp.KeyEvent("\r"))
		pgtest.WaitFor(t, pgtest.Patience, "the confirmation dialog", func() bool { return b.dialogs.Load() > before })
	}
	b.accept.Store(false)
	press() // dismissed: nothing happens
	if _, ok := leases.Get("nightly-report"); !ok {
		t.Fatal("a dismissed confirmation released the lease")
	}
	b.accept.Store(true)
	press()
	b.observe("nightly-report gone", rowState("nightly-report")+` === ''`)
	b.observe("the notice", `document.getElementById('notice').textContent.indexOf('Released nightly-report') === 0`)
	if _, ok := leases.Get("nightly-report"); ok {
		t.Error("the row is still there")
	}
}

// checkLatency fails the test when a change took more than a second to
// show (the console's acceptance criterion), and logs it.
func checkLatency(t *testing.T, what string, d time.Duration) {
	t.Helper()
	t.Logf("%s shown %s after it happened", what, d.Round(time.Millisecond))
	if d > time.Second {
		t.Errorf("%s shown %s after it happened, want at most 1s", what, d.Round(time.Millisecond))
	}
	if d < -50*time.Millisecond {
		t.Errorf("%s shown %s before it happened: clocks differ?", what, d)
	}
}

// A DNS-rebinding page in a real browser: attacker.example resolves to
// 127.0.0.1 (as the attacker's DNS answers once its page has loaded), so
// the page at http://attacker.example:PORT/ is same-origin with the
// console. Without a token the console refuses it everything: the page
// (and its form token), the event stream, the metrics, and a release even
// with a valid form token; the lease and its holder's job live on. The
// same browser at http://127.0.0.1:PORT/ gets the console and may release.
func TestServeRefusesRebindingPageInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t, chromedp.Flag("host-resolver-rules", "MAP attacker.example 127.0.0.1"))
	env, table := tableEnv(t)
	holder := holdLease(t, env, table, "victim", "--ttl", "3s")
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), table)
	srv := start(t, env, "serve", "--listen", "127.0.0.1:0", "--table", table, "--allow-release")
	own := serveURL(t, srv)
	u, err := neturl.Parse(own)
	if err != nil {
		t.Fatal(err)
	}
	evil := "http://attacker.example:" + u.Port() + "/"

	// The form token, as the console's own page has it: the rebinding page
	// is given it, to show that even a leaked token does not help.
	b.do("opening the console", chromedp.Navigate(own))
	b.observe("victim held", rowState("victim")+` === 'held'`)
	csrf := eval[string](b, `document.getElementById('console').getAttribute('data-csrf')`)

	b.do("opening the rebinding page", chromedp.Navigate(evil))
	if got := eval[string](b, `location.origin + ' ' + document.body.innerText`); !strings.HasPrefix(got, "http://attacker.example:"+u.Port()+" 421 misdirected request") ||
		!strings.Contains(got, "--allow-host") || strings.Contains(got, csrf) {
		t.Errorf("the rebinding page shows %q, want the console's 421 refusal without the form token", got)
	}
	fetch := func(what, js string) int {
		status := eval[int](b, js+`.then(function (r) { return r.status; })`, chromedp.EvalAwaitPromise)
		t.Logf("the rebinding page: %s: %d", what, status)
		return status
	}
	for _, p := range []string{"/", "/events", "/metrics", "/healthz"} {
		if status := fetch("GET "+p, `fetch(`+js(p)+`)`); status != 421 {
			t.Errorf("the rebinding page: GET %s: %d, want 421", p, status)
		}
	}
	release := `fetch('/release', {method: 'POST', body: new URLSearchParams({name: 'victim', confirm: 'yes', csrf: ` + js(csrf) + `})})`
	if status := fetch("POST /release with the form token", release); status != 421 {
		t.Errorf("the rebinding page: POST /release with the form token: %d, want 421", status)
	}
	if _, ok := leases.Get("victim"); !ok {
		t.Fatal("the rebinding page released victim")
	}
	select {
	case <-holder.done:
		t.Fatalf("the holder's run ended (exit %d): %s", holder.code, holder.stderr)
	default:
	}

	// The console's own origin: the same request releases the lease, and
	// the holder's run ends as on any force-release (exit 76).
	b.do("opening the console again", chromedp.Navigate(own))
	b.observe("the event stream connected", `document.getElementById('console').hasAttribute('data-version')`)
	if status := fetch("POST /release from the console's own page", release); status != 200 {
		t.Fatalf("POST /release from the console's own page: %d, want 200", status)
	}
	if code := holder.wait(); code != 76 {
		t.Errorf("the holder's run after the release: exit %d, want 76: %s", code, holder.stderr)
	}
}
