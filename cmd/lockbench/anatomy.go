package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

// anatomyPair is the anatomy of one session count, for both packages.
type anatomyPair struct{ ours, etcd lockbench.AnatomyResult }

// runAnatomy runs the anatomy workload (see lockbench.Anatomy) for each
// -anatomy-sessions count and both packages, each in a child process that
// runs no etcd member, so that the child's CPU time is the clients' alone;
// with the embedded cluster, this process's CPU time during the child's
// window is the members'.
func runAnatomy(ctx context.Context, cfg config, root string, embedded bool) ([]anatomyPair, error) {
	return anatomies(cfg.anatomySessions, func(impl lockbench.Impl, n int) (lockbench.AnatomyResult, error) {
		progress("anatomy of a contended handoff, %d sessions, %s (child process)", n, impl.Name)
		return childAnatomy(ctx, cfg, impl, fmt.Sprintf("%s/anatomy-%d/%s", root, n, impl.Name), n, embedded)
	})
}

// anatomies calls one for each session count and both packages, this
// package's first, and pairs the results.
func anatomies(sessions []int, one func(impl lockbench.Impl, n int) (lockbench.AnatomyResult, error)) ([]anatomyPair, error) {
	var out []anatomyPair
	for _, n := range sessions {
		var p anatomyPair
		var err error
		if p.ours, err = one(ours, n); err != nil {
			return nil, err
		}
		if p.etcd, err = one(etcd, n); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// childAnatomy runs one anatomy workload in a child process of this
// binary.
func childAnatomy(ctx context.Context, cfg config, impl lockbench.Impl, pfx string, n int, embedded bool) (lockbench.AnatomyResult, error) {
	var r lockbench.AnatomyResult
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration+2*time.Minute)
	defer cancel()
	serverPID := 0
	if embedded {
		serverPID = os.Getpid()
	}
	cmd := exec.CommandContext(ctx, exe,
		"-child-anatomy", fmt.Sprintf("%s:%d", impl.Name, n),
		"-endpoints", strings.Join(cfg.endpoints, ","),
		"-prefix", pfx,
		"-clients", strconv.Itoa(cfg.clients),
		"-duration", cfg.duration.String(),
		"-max-ops", strconv.Itoa(cfg.maxOps),
		"-server-pid", strconv.Itoa(serverPID),
		"-timeout", (cfg.duration + time.Minute).String())
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return r, fmt.Errorf("anatomy of %d sessions, %s: %w", n, impl.Name, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("anatomy of %d sessions, %s: reading result: %w", n, impl.Name, err)
	}
	return r, nil
}

// runChildAnatomy runs one anatomy workload in this process, which runs no
// etcd member, and writes its result as JSON to w.
func runChildAnatomy(ctx context.Context, cfg config, w io.Writer) error {
	name, s, ok := strings.Cut(cfg.childAnatomy, ":")
	impl, found := lockbench.Named(name)
	n, err := strconv.Atoi(s)
	if !ok || !found || err != nil || n < 2 || len(cfg.endpoints) == 0 || cfg.prefix == "" {
		return fmt.Errorf("-child-anatomy %q: want PKG:N, N >= 2, with -endpoints and -prefix", cfg.childAnatomy)
	}
	var tracer lockbench.Tracer
	cs, closeClients, err := newClients(cfg.endpoints, min(cfg.clients, n), tracer.Option)
	if err != nil {
		return err
	}
	defer closeClients()
	r, err := lockbench.Anatomy(ctx, lockbench.Env{Clients: cs}, &tracer, impl, cfg.prefix, n, cfg.serverPID,
		lockbench.Limits{Duration: cfg.duration, MaxOps: cfg.maxOps})
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(r)
}

// anatomySection writes the anatomy tables.
func anatomySection(w io.Writer, res results) {
	fmt.Fprintf(w, "\n## Anatomy of a contended handoff\n\n")
	fmt.Fprintf(w, "Each session loops Lock and Unlock on one lock, in a child process that runs no etcd member, on clients of its own. A handoff runs from one holder's Unlock call to the next holder's Unlock call, one acquisition, and is cut where the clients see it: every unary RPC of a Lock or an Unlock is timed by a client interceptor (the call's context carries the goroutine's log), and the arrival of each watch DELETE event on a client's gRPC stream by a stream interceptor, before clientv3 hands it to the watcher. The segments follow one another and add up to the cycle; \"delete answered\" is the releasing client's delete response (its header's revision names the event), and the next segment is negative when the waiter's member sent the event before the releaser's member answered. A handoff is traced whole when the waiter got the delete's event and sent a read after it; the others (the predecessor gone before the watch started, or the waiter not yet queued) are counted, not timed. CPU is user + system time per acquisition over the window: the child's (the clients', with the tracing interceptors), and the embedded members' process (both packages' servers alike; \"-\" with -endpoints).\n\n")
	for _, p := range res.anatomy {
		anatomyTables(w, p)
	}
}

// anatomyTables writes the segments of one session count's handoffs, and
// what each package's window did.
func anatomyTables(w io.Writer, p anatomyPair) {
	t := newTable("segment", "ours mean", "p50", "p99", "etcd mean", "p50", "p99")
	for i := 0; i < lockbench.NumSegments; i++ {
		om, o50, o99 := lockbench.Summary(p.ours.Segments[i])
		em, e50, e99 := lockbench.Summary(p.etcd.Segments[i])
		t.add(lockbench.SegmentNames[i], sdur(om), sdur(o50), sdur(o99), sdur(em), sdur(e50), sdur(e99))
	}
	om, o50, o99 := lockbench.Summary(p.ours.Cycles)
	em, e50, e99 := lockbench.Summary(p.etcd.Cycles)
	t.add("**cycle: Unlock called → next holder's Unlock called**", sdur(om), sdur(o50), sdur(o99), sdur(em), sdur(e50), sdur(e99))
	fmt.Fprintf(w, "%d sessions:\n\n", p.ours.Sessions)
	t.write(w)
	fmt.Fprintln(w)
	t = newTable("package", "acquisitions/s", "1 ÷ ops/s", "handoffs", "traced", "no event", "reads after the event", "client CPU/acq", "server CPU/acq")
	for _, r := range []lockbench.AnatomyResult{p.ours, p.etcd} {
		inv, reads := "-", "-"
		if x := r.PerSec(); x > 0 {
			inv = sdur(time.Duration(float64(time.Second) / x))
		}
		if r.Traced() > 0 {
			reads = num(float64(r.Reads) / float64(r.Traced()))
		}
		t.add(r.Impl, num(r.PerSec()), inv, fmt.Sprint(r.Handoffs), fmt.Sprint(r.Traced()), fmt.Sprint(r.NoEvent), reads,
			cpuPer(r.ClientCPU, r.Ops), cpuPer(r.ServerCPU, r.Ops))
	}
	t.write(w)
	fmt.Fprintln(w)
}

// cpuPer is CPU time d per operation of ops, or "-" if unknown.
func cpuPer(d time.Duration, ops int) string {
	if d < 0 || ops == 0 {
		return "-"
	}
	return sdur(d / time.Duration(ops))
}

// sdur is dur with a sign and three decimals under 1 ms, for segments
// that are short or negative.
func sdur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if d == 0 {
		return "0"
	}
	if ms > -1 && ms < 1 {
		return fmt.Sprintf("%.3fms", ms)
	}
	return dur(d)
}
