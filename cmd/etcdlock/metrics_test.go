package main

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// metricsURL is the URL that etcdlock says it serves metrics on.
var metricsURL = regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)

// scrape gets the metrics p serves, as text.
func scrape(t *testing.T, p *proc) string {
	t.Helper()
	code, body := get(t, p, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	return body
}

// get gets path from the server that p says it serves metrics on, and
// returns the status code and the body.
func get(t *testing.T, p *proc, path string) (int, string) {
	t.Helper()
	m := metricsURL.FindStringSubmatch(p.waitFor(p.stderr, "/healthz\n"))
	if m == nil {
		t.Fatalf("no metrics address on stderr:\n%s", p.stderr)
	}
	url := strings.TrimSuffix(m[1], "/metrics") + path
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// expectHealth polls p's /healthz until it answers code, and fails the
// test if it does not within 10 s.
func expectHealth(t *testing.T, p *proc, code int) {
	t.Helper()
	var got int
	var body string
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		got, body = get(t, p, "/healthz")
		return got == code
	}, "/healthz answers %d, want %d: %s", got, code, body)
}

func expectLines(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, "\n"+w+"\n") {
			t.Errorf("metrics lack %q", w)
		}
	}
}

// lock --metrics-addr serves the lock's metrics while it holds, with the
// lock's name as a label.
func TestLockMetricsAddr(t *testing.T) {
	pfx := begin(t)
	p := start(t, nil, "lock", "--metrics-addr", "127.0.0.1:0", pfx)
	p.firstLine() // held
	body := scrape(t, p)
	expectLines(t, body,
		`concurrency_lock_acquisitions_total{kind="mutex",name="`+pfx+`"} 1`,
		`concurrency_lock_holders{kind="mutex",name="`+pfx+`"} 1`,
		`concurrency_lock_wait_seconds_count{kind="mutex",name="`+pfx+`"} 1`)
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
		`concurrency_lock_leader{name="`+pfx+`"} 1`,
		`concurrency_lock_leader_changes_total{name="`+pfx+`"} 1`)
	p.release()

	p = start(t, nil, "elect", "--metrics-addr", "127.0.0.1:0", pfx+"-cmd", "two", "--", "sh", "-c", "echo leading; read line")
	p.firstLine() // the command runs as the leader
	expectLines(t, scrape(t, p), `concurrency_lock_leader{name="`+pfx+`-cmd"} 1`)
	io.WriteString(p.stdin, "done\n")
	p.expectExit(10*time.Second, 0)
}

// A malformed address is a usage error, before any wait.
func TestMetricsAddrInvalid(t *testing.T) {
	begin(t)
	expectRun(t, 10*time.Second, exitUsage, nil, []string{"lock", "--metrics-addr", "256.0.0.1:99999", "x"}, "--metrics-addr")
}

// Issue 23: a metrics port in use is a warning, not a reason not to run the
// job.
func TestMetricsAddrBusy(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"lock", "--metrics-addr", busy.Addr().String(), pfx, "--", "echo", "ran"},
		"warning: --metrics-addr", "address already in use")
	if out != "ran\n" {
		t.Errorf("the command printed %q, want ran", out)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// Issue 23: /healthz answers 200 while lock holds the lock, 503 while it
// waits; for elect, 200 while leading, 503 while campaigning, also after
// a lost leadership.
func TestHealthz(t *testing.T) {
	t.Run("lock", func(t *testing.T) {
		pfx := begin(t)
		c := sharedClient(t)
		holder, _ := holdLock(t, pfx)
		p := start(t, nil, "lock", "--metrics-addr", "127.0.0.1:0", pfx, "--", "sh", "-c", "echo ready; read line")
		etcdtest.WaitKeys(t, c, pfx, 2)
		expectHealth(t, p, http.StatusServiceUnavailable)
		holder.release()
		p.waitFor(p.stdout, "ready\n")
		expectHealth(t, p, http.StatusOK)
		io.WriteString(p.stdin, "done\n")
		p.expectExit(10*time.Second, 0)
		etcdtest.WaitKeys(t, c, pfx, 0)
	})
	t.Run("elect", func(t *testing.T) {
		pfx := begin(t)
		c := sharedClient(t)
		first := start(t, nil, "elect", "--metrics-addr", "127.0.0.1:0", pfx, "one", "--", "sh", "-c", printElectEnv)
		electKeyRev(t, first, 0)
		second := start(t, nil, "elect", "--metrics-addr", "127.0.0.1:0", pfx, "two")
		kvs := etcdtest.WaitKeys(t, c, pfx, 2)
		expectHealth(t, first, http.StatusOK)
		expectHealth(t, second, http.StatusServiceUnavailable)
		// The first loses its leadership and campaigns again behind the
		// second.
		if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
		second.firstLine()
		expectHealth(t, second, http.StatusOK)
		expectHealth(t, first, http.StatusServiceUnavailable)
		// Its command's group is gone (a signal while it is stopped would
		// end etcdlock with the command's status: see supervise).
		first.waitFor(first.stderr, "campaigning again")
		first.signal(syscall.SIGINT)
		first.expectExit(10*time.Second, exitSignal+int(syscall.SIGINT))
		second.release()
		etcdtest.WaitKeys(t, c, pfx, 0)
	})
}
