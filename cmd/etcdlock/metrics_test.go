package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// metricsURL is the URL that etcdlock says it serves metrics on.
var metricsURL = regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)

// scrape gets the metrics p serves, as text.
func scrape(t *testing.T, p *proc) string {
	t.Helper()
	m := metricsURL.FindStringSubmatch(p.waitFor(p.stderr, "/metrics\n"))
	if m == nil {
		t.Fatalf("no metrics address on stderr:\n%s", p.stderr)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", m[1], resp.StatusCode, err)
	}
	return string(body)
}

func expectLines(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, "\n"+w+"\n") {
			t.Errorf("metrics lack %q", w)
		}
	}
}

// lock --metrics-addr serves the lock's metrics while it holds.
func TestLockMetricsAddr(t *testing.T) {
	pfx := begin(t)
	p := start(t, nil, "lock", "--metrics-addr", "127.0.0.1:0", pfx)
	p.firstLine() // held
	body := scrape(t, p)
	expectLines(t, body,
		`etcd_lock_acquisitions_total{kind="mutex"} 1`,
		`etcd_lock_holders{kind="mutex"} 1`,
		`etcd_lock_wait_seconds_count{kind="mutex"} 1`)
	if !strings.Contains(body, "go_goroutines") {
		t.Error("no Go runtime metrics")
	}
	p.release()
}

// elect --metrics-addr serves the leader gauge, with and without a command.
func TestElectMetricsAddr(t *testing.T) {
	pfx := begin(t)
	p := start(t, nil, "elect", "--metrics-addr", "127.0.0.1:0", pfx, "one")
	p.firstLine() // elected
	expectLines(t, scrape(t, p),
		`etcd_lock_leader{name="`+pfx+`"} 1`,
		`etcd_lock_leader_changes_total{name="`+pfx+`"} 1`)
	p.release()

	p = start(t, nil, "elect", "--metrics-addr", "127.0.0.1:0", pfx+"-cmd", "two", "--", "sh", "-c", "echo leading; read line")
	p.firstLine() // the command runs as the leader
	expectLines(t, scrape(t, p), `etcd_lock_leader{name="`+pfx+`-cmd"} 1`)
	io.WriteString(p.stdin, "done\n")
	p.expectExit(10*time.Second, 0)
}

// An address that cannot be listened on is a usage error, before any wait.
func TestMetricsAddrInvalid(t *testing.T) {
	begin(t)
	expectRun(t, 10*time.Second, exitUsage, nil, []string{"lock", "--metrics-addr", "256.0.0.1:99999", "x"}, "--metrics-addr")
}
