package lockbench

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/embedetcd"
)

// Idle holds and waits on one client: this package's watches share one
// stream, which asks for progress about once per probe interval, not once
// per watch; etcd's package sends nothing but keepalives. The server's
// counts and the clients' agree.
func TestIdle(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	clus, err := embedetcd.Start(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer clus.Close()
	var traffic Traffic
	cfg := clientv3.Config{Endpoints: clus.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	traffic.Option(&cfg)
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	env := Env{Clients: []*clientv3.Client{c}, Watchers: GatheredWatchers(prometheus.DefaultGatherer)}
	server := GatheredServerMsgs(prometheus.DefaultGatherer)

	// TTL 3: this package probes a watch that heard nothing for 1 s to
	// 1.5 s; a window of 5 s holds at most 5 probe intervals.
	const holds, ttl, window = 4, 3, 5 * time.Second
	for _, impl := range []Impl{Ours, Etcd} {
		t.Run(impl.Name, func(t *testing.T) {
			r, err := Idle(ctx, env, &traffic, server, impl, fmt.Sprintf("/idle-test/%s", impl.Name), holds, ttl, window)
			if err != nil {
				t.Fatal(err)
			}
			if r.ServerErr != "" {
				t.Fatalf("no server counts: %s", r.ServerErr)
			}
			t.Logf("window %v, watchers %+.0f, server %+v, client %+v", r.Window, r.Watchers, r.Server, r.Client)
			// Every session renews every TTL/3, so about 3 per second here.
			if ka := r.Server[keepAliveMethod].Requests(); ka < float64(2*holds) {
				t.Errorf("server received %v keepalives from %d sessions in %v, want at least one per session", ka, 2*holds, r.Window)
			}
			// Requests in flight at the window's edges may count on one side
			// only.
			for _, m := range []string{keepAliveMethod, "Watch", "Range", "Txn"} {
				if s, cl := r.Server[m].Requests(), float64(r.Client.Sent[m]); math.Abs(s-cl) > 3 {
					t.Errorf("%s: server received %v requests, clients sent %v", m, s, cl)
				}
			}
			switch impl.Name {
			case Ours.Name:
				if r.Watchers < 2*holds {
					t.Errorf("%v watchers above the baseline, want one per hold and one per wait, %d", r.Watchers, 2*holds)
				}
				// One stream, 8 watches: about one request per interval of
				// 1 s to 1.5 s, and never 8.
				if p := r.Client.Progress; p < 2 || p > int64(window/time.Second)+2 {
					t.Errorf("%d progress requests in %v on one stream, want one per probe interval (2 to %d)", p, r.Window, int64(window/time.Second)+2)
				}
			case Etcd.Name:
				if r.Watchers < holds {
					t.Errorf("%v watchers above the baseline, want one per wait, %d", r.Watchers, holds)
				}
				if p, w := r.Client.Progress, r.Client.Sent["Watch"]; p != 0 || w != 0 {
					t.Errorf("etcd's package sent %d watch requests (%d progress requests) while idle, want none", w, p)
				}
			}
		})
	}
}

func TestParseSample(t *testing.T) {
	for _, tc := range []struct {
		line string
		want sample
		ok   bool
	}{
		{`grpc_server_msg_received_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 12`,
			sample{receivedMetric, "Range", "unary", 12}, true},
		{`grpc_server_handled_total{grpc_code="OK",grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 3e+00`,
			sample{handledMetric, "Watch", "bidi_stream", 3}, true},
		{`# TYPE grpc_server_msg_received_total counter`, sample{}, false},
		{`etcd_debugging_mvcc_watcher_total 4`, sample{}, false},
		{`process_open_fds{x="y"} 4`, sample{}, false},
	} {
		got, ok := parseSample(tc.line)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseSample(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// A stream's requests are its messages received less the Recv that ended
// each stream; a unary call's are its messages.
func TestMethodMsgsRequests(t *testing.T) {
	s := ServerMsgs{}
	for _, x := range []sample{
		{receivedMetric, "LeaseKeepAlive", "bidi_stream", 10},
		{handledMetric, "LeaseKeepAlive", "bidi_stream", 4},
		{receivedMetric, "Range", "unary", 5},
		{handledMetric, "Range", "unary", 5},
	} {
		s.add(x)
	}
	d := s.Sub(ServerMsgs{"Range": {Received: 2, Handled: 2}})
	if got := d["LeaseKeepAlive"].Requests(); got != 6 {
		t.Errorf("LeaseKeepAlive requests = %v, want 6", got)
	}
	if got := d["Range"].Requests(); got != 3 {
		t.Errorf("Range requests = %v, want 3", got)
	}
}
