package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/cmd/pglease/internal/console"
	"github.com/pglease/pglease/internal/pgtest"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs /metrics and parses it.
func (f *fixture) scrape() map[string]*dto.MetricFamily {
	f.t.Helper()
	resp, body := f.get("/metrics")
	if resp.StatusCode != 200 {
		f.t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		f.t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return mfs
}

// value returns the gauge of family name with the label (name, value), or
// with no labels when label is empty; ok is false when there is none.
func value(mfs map[string]*dto.MetricFamily, family string, label ...string) (float64, bool) {
	mf := mfs[family]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if len(label) == 0 && len(m.GetLabel()) == 0 {
			return m.GetGauge().GetValue(), true
		}
		for _, lp := range m.GetLabel() {
			if len(label) == 2 && lp.GetName() == label[0] && lp.GetValue() == label[1] {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// /metrics after a short scenario: one held lease, one stale, one expired.
func TestMetrics(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{MetricsPerLease: true})
	c := f.client()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	l, err := c.TryAcquire(ctx, "held", pglease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), f.table)
	leases.Insert("stale", "stuck-host", 9001, time.Hour, "")
	leases.SetHeartbeatAge("stale", 40*time.Minute)
	leases.Insert("expired", "gone-host", 9000, time.Hour, "")
	leases.SetExpiry("expired", -time.Second)
	events := f.stream()
	await(t, events, "three leases", func(m msg) bool {
		return m.state("held") == "held" && m.state("stale") == "stale" && m.state("expired") == "expired"
	})

	mfs := f.scrape()
	for _, want := range []struct {
		family string
		label  []string
		value  float64
	}{
		{"pglease_table_leases", []string{"state", "held"}, 1},
		{"pglease_table_leases", []string{"state", "stale"}, 1},
		{"pglease_table_leases", []string{"state", "expired"}, 1},
		{"pglease_table_exists", nil, 1},
		{"pglease_table_waiters", nil, 0},
		{"pglease_table_oldest_wait_seconds", nil, 0},
		{"pglease_console_viewers", nil, 1},
		{"pglease_console_listener_up", nil, 1},
		{"pglease_table_lease_token", []string{"name", "held"}, float64(l.Token())},
		{"pglease_table_lease_token", []string{"name", "stale"}, 9001},
	} {
		if got, ok := value(mfs, want.family, want.label...); !ok || got != want.value {
			t.Errorf("%s%v = %v (present %v), want %v", want.family, want.label, got, ok, want.value)
		}
	}
	if v, _ := value(mfs, "pglease_table_oldest_heartbeat_age_seconds"); v < 40*60 || v > 41*60 {
		t.Errorf("pglease_table_oldest_heartbeat_age_seconds = %v, want about 2400", v)
	}
	if v, _ := value(mfs, "pglease_table_lease_expires_in_seconds", "name", "expired"); v >= 0 {
		t.Errorf("expires in of the expired lease = %v, want negative", v)
	}
	if v, _ := value(mfs, "pglease_table_lease_heartbeat_age_seconds", "name", "held"); v < 0 || v > 60 {
		t.Errorf("heartbeat age of held = %v", v)
	}
	if v, _ := value(mfs, "pglease_table_last_refresh_timestamp_seconds"); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("pglease_table_last_refresh_timestamp_seconds = %v", v)
	}
	if h := mfs["pglease_table_lease_token"].GetHelp(); !strings.Contains(h, "every lease name becomes a time series") {
		t.Errorf("help of the per-lease series: %q", h)
	}
	if mfs["go_goroutines"] == nil {
		t.Error("no Go runtime metrics")
	}
}

// Without --metrics-per-lease no series names a lease.
func TestMetricsWithoutPerLeaseSeries(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{})
	c := f.client()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	if _, err := c.TryAcquire(ctx, "secret-project", pglease.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	await(t, f.stream(), "the lease", func(m msg) bool { return m.state("secret-project") == "held" })
	_, body := f.get("/metrics")
	if strings.Contains(body, "secret-project") || strings.Contains(body, "pglease_table_lease_") {
		t.Errorf("/metrics names a lease:\n%s", body)
	}
	if v, ok := value(f.scrape(), "pglease_table_leases", "state", "held"); !ok || v != 1 {
		t.Errorf("held = %v, %v", v, ok)
	}
}

// /healthz: 200 while the database is read, 503 once it is gone, 200 again
// when it is back.
func TestHealthz(t *testing.T) {
	t.Parallel()
	proxy := pgtest.NewProxy(t, pgtest.HostPort(t, pgtest.DSN(t)))
	f := start(t, console.Config{DSN: proxy.DSN(pgtest.DSN(t)), FullRefresh: 200 * time.Millisecond})
	type health struct {
		Status   string   `json:"status"`
		Database bool     `json:"database_reachable"`
		Listener bool     `json:"listener_connected"`
		Age      *float64 `json:"last_refresh_age_seconds"`
	}
	check := func() (int, health) {
		resp, body := f.get("/healthz")
		var h health
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("/healthz: %v: %s", err, body)
		}
		return resp.StatusCode, h
	}
	pgtest.WaitFor(t, pgtest.Patience, "/healthz 200 with the listener up", func() bool {
		code, h := check()
		return code == http.StatusOK && h.Listener && h.Database && h.Age != nil
	})
	proxy.Refuse(true)
	proxy.ResetAll()
	pgtest.WaitFor(t, pgtest.Patience, "/healthz 503", func() bool {
		code, h := check()
		return code == http.StatusServiceUnavailable && h.Status == "unavailable" && !h.Database && !h.Listener
	})
	if v, _ := value(f.scrape(), "pglease_console_listener_up"); v != 0 {
		t.Errorf("pglease_console_listener_up = %v with the database gone", v)
	}
	proxy.Refuse(false)
	pgtest.WaitFor(t, pgtest.Patience, "/healthz 200 again", func() bool {
		code, h := check()
		return code == http.StatusOK && h.Listener
	})
}
