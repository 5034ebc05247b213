package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/lockbench"
)

// report writes the tables and the targets of the issue as Markdown, which
// reads as well in a terminal as in BENCHMARKS.md.
func report(w io.Writer, cfg config, where string, took time.Duration, res results) {
	fmt.Fprintf(w, "# lockbench\n\n")
	if cfg.quick {
		fmt.Fprintf(w, "**-quick: a tiny workload that only checks the harness works; its numbers mean nothing.**\n\n")
	}
	fmt.Fprintf(w, "- command: `%s`\n- cluster: %s\n- machine: %s\n", strings.Join(append([]string{"lockbench"}, os.Args[1:]...), " "), where, machine())
	fmt.Fprintf(w, "- window %v per package per workload (raw Put and Get, uncontended and TryLock: in %d interleaved rounds); at most %d ops per window; sessions spread over up to %d clients; run took %v\n",
		cfg.duration, cfg.rounds, cfg.maxOps, cfg.clients, took.Round(time.Second))
	fmt.Fprintf(w, "- ratio rows are ours ÷ etcd: below 1× is better for latencies and traffic, above 1× for ops/s; etcd#2 ÷ etcd is the noise of the run\n\n")

	fmt.Fprintf(w, "## Latency, throughput and traffic per operation\n\n")
	fmt.Fprintf(w, "Contended and queue rows time handoffs (holder's Unlock returned → next holder's Lock returned); their ops are acquisitions, each with its Unlock, and Unlock is the mean latency of those Unlocks: one acquisition takes a handoff plus an Unlock, which bounds ops/s. rpc = unary RPCs, wreq = watch streams opened and create/cancel requests sent on them, ev = watch events received; lease keepalives are not counted.\n\n")
	t := newTable("workload", "package", "n", "mean", "p50", "p90", "p99", "ops/s", "rpc/op", "wreq/op", "ev/op", "Unlock")
	addResult(t, res.put)
	addResult(t, res.get)
	un := res.uncontended
	addPair(t, un[ours.Name], un[etcd.Name])
	addResult(t, un[etcd2.Name])
	addRatio(t, "etcd#2 ÷ etcd (noise)", un[etcd2.Name], un[etcd.Name])
	addPair(t, res.tryLock.ours, res.tryLock.etcd)
	for _, p := range res.contended {
		addPair(t, p.ours, p.etcd)
	}
	for _, q := range res.queue {
		addPair(t, q.ours.Result, q.etcd.Result)
	}
	t.write(w)
	if e := early(res); len(e) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(e, "\n"))
	}

	fmt.Fprintf(w, "\n## Queue: waiters queued on one held lock, then drained\n\n")
	fmt.Fprintf(w, "Traffic is that of the waiters' clients (the holder has its own): per acquisition, a waiter's wake-up, re-check and Unlock. Heap and goroutines are measured in a child process that runs no etcd member, after a GC: per session opened, and per Lock then left waiting (including the goroutine blocked in Lock); shown for queues of %d or more.\n\n", minMemWaiters)
	t = newTable("waiters", "package", "handoff mean", "p99", "handoffs/s", "rpc/handoff", "wreq/handoff", "ev/handoff", "heap B/session", "heap B/waiter", "goroutines/session", "goroutines/waiter")
	for _, q := range res.queue {
		for _, r := range []lockbench.QueueResult{q.ours, q.etcd} {
			st := r.Stats()
			mem := []string{"-", "-", "-", "-"} // a handful of waiters is below the noise of the heap
			if r.Waiters >= minMemWaiters {
				mem = []string{fmt.Sprintf("%.0f", r.HeapPerSession), fmt.Sprintf("%.0f", r.HeapPerWaiter),
					fmt.Sprintf("%.1f", r.GoroutinesPerSession), fmt.Sprintf("%.1f", r.GoroutinesPerWaiter)}
			}
			t.add(append([]string{fmt.Sprint(r.Waiters), r.Impl, dur(st.Mean), dur(st.P99), num(st.PerSec), num(st.RPC), num(st.WatchReqs), num(st.Events)}, mem...)...)
		}
	}
	t.write(w)

	fmt.Fprintf(w, "\n## Lost-lock notice: lease revoked by another client → holder told\n\n")
	fmt.Fprintf(w, "Session TTL %d s (short, to keep the run short); the revoke comes at a random point of the keepalive period (TTL/3); waits are capped at %v.\n\n", cfg.lostTTL, cfg.lostBound)
	t = newTable("package", "signal", "trials", "min", "mean", "max", "over the cap")
	for _, l := range res.lost {
		st := lockbench.Result{Samples: l.samples}.Stats()
		lo, hi := "-", "-"
		if len(l.samples) > 0 {
			lo, hi = dur(minOf(l.samples)), dur(maxOf(l.samples))
		}
		mean := dur(st.Mean)
		if l.capped > 0 {
			mean = fmt.Sprintf("> %v", cfg.lostBound)
		}
		t.add(l.impl.Name, l.impl.LostSignal, fmt.Sprint(len(l.samples)+l.capped), lo, mean, hi, fmt.Sprint(l.capped))
	}
	t.write(w)

	fmt.Fprintf(w, "\n## Targets of issue 3 (ratios from this run)\n\n")
	t = newTable("target", "measured", "met")
	for _, g := range targets(res) {
		t.add(g.what, g.measured, yes(g.met))
	}
	t.write(w)
}

func addResult(t *table, r lockbench.Result) {
	st := r.Stats()
	t.add(r.Workload, r.Impl, fmt.Sprint(st.N), dur(st.Mean), dur(st.P50), dur(st.P90), dur(st.P99), num(st.PerSec), num(st.RPC), num(st.WatchReqs), num(st.Events), dur(st.UnlockMean))
}

func addPair(t *table, a, b lockbench.Result) {
	addResult(t, a)
	addResult(t, b)
	addRatio(t, a.Impl+" ÷ "+b.Impl, a, b)
}

func addRatio(t *table, label string, a, b lockbench.Result) {
	x, y := a.Stats(), b.Stats()
	t.add("", label, "",
		ratio(x.Mean.Seconds(), y.Mean.Seconds()), ratio(x.P50.Seconds(), y.P50.Seconds()),
		ratio(x.P90.Seconds(), y.P90.Seconds()), ratio(x.P99.Seconds(), y.P99.Seconds()),
		ratio(x.PerSec, y.PerSec), ratio(x.RPC, y.RPC), ratio(x.WatchReqs, y.WatchReqs), ratio(x.Events, y.Events),
		ratio(x.UnlockMean.Seconds(), y.UnlockMean.Seconds()))
}

// early lists the workloads where some next Lock returned before the
// previous holder's Unlock did.
func early(res results) []string {
	var rs []lockbench.Result
	for _, p := range res.contended {
		rs = append(rs, p.ours, p.etcd)
	}
	for _, q := range res.queue {
		rs = append(rs, q.ours.Result, q.etcd.Result)
	}
	var out []string
	for _, r := range rs {
		if r.Early > 0 {
			out = append(out, fmt.Sprintf("- %s, %s: in %d of %d handoffs the next Lock returned before the previous Unlock did (negative samples, kept).", r.Workload, r.Impl, r.Early, len(r.Samples)))
		}
	}
	return out
}

// minMemWaiters is the shortest queue whose heap and goroutines per waiter
// are reported.
const minMemWaiters = 100

type target struct {
	what, measured string
	met            bool
}

// targets judges the targets of issue 3 on the results of one run.
func targets(res results) []target {
	var ts []target
	for _, p := range res.contended {
		n := p.ours.Workload
		o, e := p.ours.Stats(), p.etcd.Stats()
		if want, ok := map[string]float64{"contended, 2 sessions": 5, "contended, 8 sessions": 3}[n]; ok {
			r := o.PerSec / e.PerSec
			ts = append(ts, target{
				fmt.Sprintf("%s: throughput ≥ %.0f× etcd's", n, want),
				fmt.Sprintf("%s/s vs %s/s = %.2f×", num(o.PerSec), num(e.PerSec), r), r >= want})
			rm, r90 := o.Mean.Seconds()/e.Mean.Seconds(), o.P90.Seconds()/e.P90.Seconds()
			ts = append(ts, target{
				fmt.Sprintf("%s: handoff mean and p90 ≤ 1/5 of etcd's", n),
				fmt.Sprintf("mean %s vs %s = %.3f×; p90 %s vs %s = %.3f×", dur(o.Mean), dur(e.Mean), rm, dur(o.P90), dur(e.P90), r90),
				rm <= 0.2 && r90 <= 0.2})
		}
	}

	un := res.uncontended
	o, e, e2 := un[ours.Name].Stats(), un[etcd.Name].Stats(), un[etcd2.Name].Stats()
	noise := math.Abs(e2.Mean.Seconds()/e.Mean.Seconds() - 1)
	r := o.Mean.Seconds() / e.Mean.Seconds()
	ts = append(ts, target{
		"uncontended Lock+Unlock: mean no slower than etcd's beyond the noise (how far etcd#2 ÷ etcd is from 1×)",
		fmt.Sprintf("%s vs %s = %.3f×; noise %.3f; p50 %.3f×", dur(o.Mean), dur(e.Mean), r, noise, o.P50.Seconds()/e.P50.Seconds()),
		r <= 1+noise})
	ts = append(ts, target{
		"uncontended Lock+Unlock: same RPCs as etcd's (two)",
		fmt.Sprintf("ours %s, etcd %s rpc/op", num(o.RPC), num(e.RPC)),
		math.Abs(o.RPC-2) < 0.005 && math.Abs(e.RPC-2) < 0.005})

	if len(res.queue) >= 2 {
		// A herd shows as wake-ups: events and re-check RPCs that grow with
		// the queue. Watch requests are shown but not judged: a client
		// multiplexes its watches on one stream and closes the stream with its
		// last watch instead of sending a cancel, so their count depends on
		// how many waiters share a client, not on the queue.
		lo, hi := res.queue[0], res.queue[len(res.queue)-1]
		per := func(q lockbench.QueueResult) string {
			st := q.Stats()
			return fmt.Sprintf("%.2f rpc + %.2f ev (%.2f wreq)", st.RPC, st.Events, st.WatchReqs)
		}
		a, b := lo.ours.Stats(), hi.ours.Stats()
		ts = append(ts, target{
			fmt.Sprintf("unary RPCs and watch events per handoff constant from %d to %d waiters (within 10%%)", lo.ours.Waiters, hi.ours.Waiters),
			fmt.Sprintf("ours %s → %s; etcd %s → %s", per(lo.ours), per(hi.ours), per(lo.etcd), per(hi.etcd)),
			within(b.RPC, a.RPC, 0.1) && within(b.Events, a.Events, 0.1)})
	}

	put := res.put.Stats().Mean
	var rows []lockbench.Result
	for _, p := range res.contended {
		rows = append(rows, p.ours)
	}
	if len(res.queue) > 0 {
		rows = append(rows, res.queue[len(res.queue)-1].ours.Result)
	}
	for _, r := range rows {
		m := r.Stats().Mean
		x := m.Seconds() / put.Seconds()
		ts = append(ts, target{
			fmt.Sprintf("%s: mean handoff ≤ 3× raw Put's mean", r.Workload),
			fmt.Sprintf("%s vs %s = %.2f×", dur(m), dur(put), x), x <= 3})
	}
	return ts
}

// within reports whether x is within frac of ref.
func within(x, ref, frac float64) bool { return math.Abs(x-ref) <= frac*ref }

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "**NO**"
}

// dur formats a latency in milliseconds with three significant digits.
func dur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch a := math.Abs(ms); {
	case d == 0:
		return "-"
	case a < 10:
		return fmt.Sprintf("%.2fms", ms)
	case a < 100:
		return fmt.Sprintf("%.1fms", ms)
	default:
		return fmt.Sprintf("%.0fms", ms)
	}
}

func num(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	r := a / b
	if r < 0.1 {
		return fmt.Sprintf("%.3f×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

func minOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}

func maxOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// table is a Markdown table with padded columns.
type table struct {
	head []string
	rows [][]string
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	width := make([]int, len(t.head))
	for _, row := range append([][]string{t.head}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range cells {
			fmt.Fprintf(&b, " %s%s |", c, strings.Repeat(" ", width[i]-len([]rune(c))))
		}
		fmt.Fprintln(w, b.String())
	}
	line(t.head)
	sep := make([]string, len(t.head))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, row := range t.rows {
		line(row)
	}
}
