package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

// idleRun is the idle workload of one layout and TTL, for both packages.
type idleRun struct {
	layout     string
	ours, etcd lockbench.IdleResult
}

// idleResults is what the idle group measured.
type idleResults struct {
	runs       []idleRun
	serverSrc  string // where the server-side counts came from
	loadBefore string // /proc/loadavg as the group started and ended
	loadAfter  string
	took       time.Duration
}

// runIdle runs the idle workload for each TTL of -idle-ttls in two
// layouts: every session on one client (all of a package's watches on one
// stream), and one session per client, a fleet of -idle-clients processes.
// gauges gives the server's watcher and watch-stream counts.
func runIdle(ctx context.Context, cfg config, gauges lockbench.Env, server lockbench.ServerCount, root string) (*idleResults, error) {
	res := &idleResults{loadBefore: loadavg()}
	start := time.Now()
	layouts := []struct {
		name           string
		clients, holds int
	}{
		{"one client", 1, cfg.idleHolds},
		{"fleet", cfg.idleClients, cfg.idleClients / 2},
	}
	for _, ttl := range cfg.idleTTLs {
		for _, l := range layouts {
			var traffic lockbench.Traffic
			cs, closeClients, err := newClients(cfg.endpoints, l.clients, traffic.Option)
			if err != nil {
				return nil, err
			}
			env := gauges
			env.Clients = cs
			run := idleRun{layout: l.name}
			for _, x := range []struct {
				impl lockbench.Impl
				into *lockbench.IdleResult
			}{{ours, &run.ours}, {etcd, &run.etcd}} {
				progress("idle, %s: %d holds and %d waits on %d clients, TTL %d s, window %v, %s",
					l.name, l.holds, l.holds, l.clients, ttl, cfg.idleWindow, x.impl.Name)
				r, err := lockbench.Idle(ctx, env, &traffic, server, x.impl,
					fmt.Sprintf("%s/idle-%d-%d-%d/%s", root, ttl, l.clients, l.holds, x.impl.Name), l.holds, ttl, cfg.idleWindow)
				if err != nil {
					closeClients()
					return nil, err
				}
				*x.into = r
				progress("idle, %s, TTL %d s, %s: %.0f watchers on %.0f watch streams; over %v the servers received %v; the clients sent %d progress requests",
					l.name, ttl, x.impl.Name, r.Watchers, r.WatchStreams, r.Window.Round(time.Millisecond), serverCounts(r), r.Client.Progress)
			}
			closeClients()
			res.runs = append(res.runs, run)
		}
	}
	res.took, res.loadAfter = time.Since(start), loadavg()
	return res, nil
}

// serverCounts formats r's server-side requests by method, for progress.
func serverCounts(r lockbench.IdleResult) string {
	if r.ServerErr != "" {
		return "unknown (" + r.ServerErr + ")"
	}
	var parts []string
	for _, m := range idleMethods([]idleRun{{ours: r}}) {
		if n := r.Server[m].Requests(); n != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", m, n))
		}
	}
	return strings.Join(parts, ", ")
}

// loadavg is the machine's load, from /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// idleMethods are the methods of the idle table, in column order: those
// always shown, then any other that any run counted.
func idleMethods(rs []idleRun) []string {
	first := []string{"LeaseKeepAlive", "Watch", "Range", "Txn"}
	var more []string
	for _, run := range rs {
		for _, r := range []lockbench.IdleResult{run.ours, run.etcd} {
			for m := range r.Server {
				if !slices.Contains(first, m) && !slices.Contains(more, m) {
					more = append(more, m)
				}
			}
			for m := range r.Client.Sent {
				if !slices.Contains(first, m) && !slices.Contains(more, m) {
					more = append(more, m)
				}
			}
		}
	}
	slices.Sort(more)
	return append(first, more...)
}

// requests is what r counted for method over its window: the server's
// count, or the clients' if the server's is missing.
func requests(r lockbench.IdleResult, method string) float64 {
	if r.ServerErr != "" {
		return float64(r.Client.Sent[method])
	}
	return r.Server[method].Requests()
}

// idleSection writes the idle workload.
func idleSection(w io.Writer, cfg config, res *idleResults) {
	fmt.Fprintf(w, "\n## Idle holds and waits: what they cost the cluster\n\n")
	fmt.Fprintf(w, "For each package, layout and TTL: N locks held, each by a session of its own, and N sessions waiting, one queued behind each hold (2N sessions). "+
		"This package's holds are watched, as every hold is once its context is asked for (Mutex.Ctx); etcd's package has no such context, its holds watch nothing, and Session.Done costs nothing. "+
		"Layouts: one client (all of a package's watches on one gRPC stream); fleet: one client per session, as a fleet of processes, one hold or wait each. "+
		"Once every key is in etcd and the setup's requests are done, the requests that reach the servers are counted for %v, by method, from %s; "+
		"a stream's requests are its messages received less the Recv that ended each stream. "+
		"progress = watch progress requests, counted by client interceptors (part of Watch). "+
		"Rates are requests per minute per 1,000 idle holds and waits (2N); a session renews its lease 3 times per TTL in both packages, the baseline (LeaseKeepAlive). "+
		"Counts, not times: the machine's load (1, 5, 15 min) was %s at the group's start and %s at its end; the group took %v.\n\n",
		cfg.idleWindow, res.serverSrc, res.loadBefore, res.loadAfter, res.took.Round(time.Second))
	methods := idleMethods(res.runs)
	head := []string{"TTL", "layout", "package", "holds+waits", "clients", "watchers", "watch streams"}
	for _, m := range methods {
		head = append(head, m)
		if m == "Watch" {
			head = append(head, "progress")
		}
	}
	head = append(head, "all", "all ÷ keepalive", "progress/client/min", "progress/stream/min")
	t := newTable(head...)
	raw := newTable(append([]string{"TTL", "layout", "package", "window"}, append(slices.Clone(methods), "progress (client)", "Watch (client)")...)...)
	for _, run := range res.runs {
		for _, r := range []lockbench.IdleResult{run.ours, run.etcd} {
			cells := []string{fmt.Sprintf("%d s", r.TTL), run.layout, r.Impl, fmt.Sprint(r.HoldsAndWaits()), fmt.Sprint(r.Clients), fmt.Sprintf("%.0f", r.Watchers), fmt.Sprintf("%.0f", r.WatchStreams)}
			rawCells := []string{fmt.Sprintf("%d s", r.TTL), run.layout, r.Impl, dur(r.Window)}
			var all float64
			for _, m := range methods {
				n := requests(r, m)
				all += n
				cells = append(cells, num(r.PerThousandPerMinute(n)))
				if m == "Watch" {
					cells = append(cells, num(r.PerThousandPerMinute(float64(r.Client.Progress))))
				}
				rawCells = append(rawCells, fmt.Sprintf("%.0f", n))
			}
			perKA := "-"
			if ka := requests(r, "LeaseKeepAlive"); ka > 0 {
				perKA = fmt.Sprintf("%.2f", all/ka)
			}
			perStream := "-"
			if r.WatchStreams > 0 && r.Window > 0 {
				perStream = num(float64(r.Client.Progress) / r.Window.Minutes() / r.WatchStreams)
			}
			cells = append(cells, num(r.PerThousandPerMinute(all)), perKA, num(r.PerClientPerMinute(float64(r.Client.Progress))), perStream)
			t.add(cells...)
			raw.add(append(rawCells, fmt.Sprint(r.Client.Progress), fmt.Sprint(r.Client.Sent["Watch"]))...)
		}
	}
	t.write(w)
	fmt.Fprintf(w, "\nRaw counts over each window (server-side by method; progress and Watch as the clients sent them):\n\n")
	raw.write(w)
	for _, run := range res.runs {
		for _, r := range []lockbench.IdleResult{run.ours, run.etcd} {
			if r.ServerErr != "" {
				fmt.Fprintf(w, "\n- %s, %s, TTL %d s: no server-side counts (%s); the clients' counts are shown\n", r.Impl, run.layout, r.TTL, r.ServerErr)
			}
		}
	}
}
