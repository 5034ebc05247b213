package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-a9d410c6/concurrency"
)

// metricsFlagUsage is the help of --metrics-addr, for lock and elect.
const metricsFlagUsage = "serve Prometheus metrics on http://ADDR/metrics while running (e.g. 127.0.0.1:9464); empty: no metrics"

// serveMetrics starts serving the package's metrics, with the Go runtime's
// and the process's, on addr at /metrics, on a registry of its own. It
// returns the metrics to report to and a function that stops the server.
// An empty addr serves nothing, and returns nil metrics: WithMetrics(nil)
// and WithLeadMetrics(nil) change nothing. The listener is opened before
// serveMetrics returns, so that an address in use is a usage error at once
// rather than after the wait.
func serveMetrics(addr string, quiet bool, stderr io.Writer) (*concurrency.Metrics, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := concurrency.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, withCode(exitUsage, fmt.Errorf("--metrics-addr: %w", err))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(stderr, "etcdlock: serving metrics: %v\n", err)
		}
	}()
	if !quiet {
		fmt.Fprintf(stderr, "etcdlock: serving metrics on http://%s/metrics\n", ln.Addr())
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		<-done
	}
	return m, stop, nil
}
