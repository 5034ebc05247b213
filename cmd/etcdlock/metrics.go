package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-a9d410c6/concurrency"
	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
)

// metricsFlagUsage is the help of --metrics-addr, for lock and elect.
const metricsFlagUsage = "serve Prometheus metrics on http://ADDR/metrics, and /healthz (200 while holding the lock or leading, else 503), while running (e.g. 127.0.0.1:9464); empty: neither"

// health is what /healthz reports: 200 while the hold it was given lasts
// (the lock is held, the leadership won), 503 otherwise. A nil *health
// (no --metrics-addr) ignores everything.
type health struct {
	what string // "holding lock \"NAME\"", "leading \"NAME\""

	mu sync.Mutex  // guards up
	up func() bool // reports whether the hold lasts; nil while there is none
}

// watch makes /healthz report 200 until ctx, a hold's context, ends.
func (h *health) watch(ctx context.Context) {
	h.set(func() bool { return ctx.Err() == nil })
}

// set makes /healthz report 200 while up returns true; nil reports 503.
func (h *health) set(up func() bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.up = up
}

func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	up := h.up != nil && h.up()
	h.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if up {
		fmt.Fprintf(w, "ok: %s\n", h.what)
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, "not %s\n", h.what)
}

// served is what serveMetrics serves: the package's metrics, and the
// health that /healthz reports. Both are nil without an address (an
// interface, so that WithMetrics is given a nil recorder, not a nil
// *concurrencyprom.Metrics in one).
type served struct {
	metrics concurrency.MetricsRecorder
	health  *health
}

// serveMetrics starts serving the package's metrics, with the Go runtime's
// and the process's, on addr at /metrics, on a registry of its own, and
// /healthz, reporting what holding says (e.g. holding lock "NAME"). The
// lock metrics carry the label name: a process takes one lock or one
// election, so it adds one series per metric. It returns what it serves and
// a function that stops the server.
//
// An empty addr serves nothing, and returns nil metrics and health:
// WithMetrics(nil) and WithLeadMetrics(nil) change nothing. The listener is
// opened before serveMetrics returns, so that a malformed address is a
// usage error at once rather than after the wait. An address that is well
// formed but cannot be listened on now (in use, not on this host, a
// privileged port) only gets a warning: metrics are no reason not to run
// the job.
func serveMetrics(addr string, quiet bool, stderr io.Writer, holding string) (served, func(), error) {
	if addr == "" {
		return served{}, func() {}, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := concurrencyprom.New(reg, concurrencyprom.WithLockNameLabel())
	if err != nil {
		return served{}, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EACCES):
		fmt.Fprintf(stderr, "etcdlock: warning: --metrics-addr: %v; running without metrics and /healthz\n", err)
		return served{}, func() {}, nil
	case err != nil:
		return served{}, nil, withCode(exitUsage, fmt.Errorf("--metrics-addr: %w", err))
	}
	h := &health{what: holding}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/healthz", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(stderr, "etcdlock: serving metrics: %v\n", err)
		}
	}()
	if !quiet {
		fmt.Fprintf(stderr, "etcdlock: serving metrics on http://%s/metrics and /healthz\n", ln.Addr())
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		<-done
	}
	return served{metrics: m, health: h}, stop, nil
}
