package lockbench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The etcd server's gRPC metrics (go-grpc-middleware's prometheus provider,
// which etcd v3.7's v3rpc.Server installs and registers once per process
// with prometheus's default registry), labelled by grpc_method and
// grpc_type. A stream counts one message received per request, and one
// more for the Recv that ends it (EOF or cancellation): the interceptor
// counts every Recv, failed or not. grpc_server_handled_total counts the
// streams that ended, so requests on a stream method = received − handled.
const (
	receivedMetric = "grpc_server_msg_received_total"
	handledMetric  = "grpc_server_handled_total"
)

// MethodMsgs is what a cluster's gRPC servers received for one method.
type MethodMsgs struct {
	// Received counts the messages received: one per unary call, and for
	// a stream one per request plus one per stream that ended.
	Received float64
	// Handled counts the calls that ended (unary calls and streams).
	Handled float64
	// Stream is true for a streaming method (Watch, LeaseKeepAlive).
	Stream bool
}

// Requests is the number of requests: for a stream method, the messages
// received less the failed Recv that ended each stream.
func (m MethodMsgs) Requests() float64 {
	if m.Stream {
		return m.Received - m.Handled
	}
	return m.Received
}

// ServerMsgs are the server-side counts by method name (Range, Txn,
// LeaseKeepAlive, Watch, ...), summed over the members.
type ServerMsgs map[string]MethodMsgs

// Sub returns s minus t, method by method, leaving out methods that did
// not move.
func (s ServerMsgs) Sub(t ServerMsgs) ServerMsgs {
	d := ServerMsgs{}
	for name, m := range s {
		o := t[name]
		x := MethodMsgs{Received: m.Received - o.Received, Handled: m.Handled - o.Handled, Stream: m.Stream}
		if x.Received != 0 || x.Handled != 0 {
			d[name] = x
		}
	}
	return d
}

// ServerCount reads the server-side counts of a cluster.
type ServerCount func(ctx context.Context) (ServerMsgs, error)

// sample is one sample of a labelled counter.
type sample struct {
	name, method, typ string
	value             float64
}

func (s ServerMsgs) add(x sample) {
	m := s[x.method]
	m.Stream = m.Stream || strings.HasSuffix(x.typ, "stream")
	switch x.name {
	case receivedMetric:
		m.Received += x.value
	case handledMetric:
		m.Handled += x.value
	}
	s[x.method] = m
}

// GatheredServerMsgs reads the counts from g: with members running in
// this process, prometheus.DefaultGatherer holds the one set of gRPC
// server metrics that all of them count in.
func GatheredServerMsgs(g prometheus.Gatherer) ServerCount {
	return func(context.Context) (ServerMsgs, error) {
		mfs, err := g.Gather()
		if err != nil {
			return nil, err
		}
		s, found := ServerMsgs{}, false
		for _, mf := range mfs {
			name := mf.GetName()
			if name != receivedMetric && name != handledMetric {
				continue
			}
			found = found || name == receivedMetric
			for _, m := range mf.GetMetric() {
				x := sample{name: name, value: m.GetCounter().GetValue()}
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "grpc_method":
						x.method = l.GetValue()
					case "grpc_type":
						x.typ = l.GetValue()
					}
				}
				s.add(x)
			}
		}
		if !found {
			return nil, fmt.Errorf("lockbench: no %s in this process's metrics", receivedMetric)
		}
		return s, nil
	}
}

// ScrapedServerMsgs sums the counts over the /metrics pages of endpoints,
// one per member of a cluster that runs outside this process.
func ScrapedServerMsgs(endpoints []string) ServerCount {
	return func(ctx context.Context) (ServerMsgs, error) {
		s := ServerMsgs{}
		for _, ep := range endpoints {
			if err := scrapeServerMsgs(ctx, strings.TrimSuffix(ep, "/")+"/metrics", s); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
}

func scrapeServerMsgs(ctx context.Context, url string, into ServerMsgs) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("lockbench: GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	found := false
	for sc.Scan() {
		x, ok := parseSample(sc.Text())
		if ok && (x.name == receivedMetric || x.name == handledMetric) {
			found = found || x.name == receivedMetric
			into.add(x)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("lockbench: reading %s: %w", url, err)
	}
	if !found {
		return fmt.Errorf("lockbench: no %s at %s", receivedMetric, url)
	}
	return nil
}

// parseSample parses one line of the Prometheus text exposition,
// name{label="value",...} value, keeping the grpc_method and grpc_type
// labels. Comments and unlabelled samples are not samples here.
func parseSample(line string) (sample, bool) {
	name, rest, ok := strings.Cut(line, "{")
	if !ok || strings.HasPrefix(name, "#") {
		return sample{}, false
	}
	labels, value, ok := strings.Cut(rest, "} ")
	if !ok {
		return sample{}, false
	}
	v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
	if err != nil {
		return sample{}, false
	}
	x := sample{name: name, value: v}
	for _, l := range strings.Split(labels, ",") {
		k, val, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		val, err := strconv.Unquote(val)
		if err != nil {
			continue
		}
		switch k {
		case "grpc_method":
			x.method = val
		case "grpc_type":
			x.typ = val
		}
	}
	return x, x.method != ""
}

// Traffic counts, client-side, the requests clients send by method: a
// unary call, or a message sent on a stream (each lease keepalive, and each
// watch create, cancel or progress request). It tells the progress
// requests apart from the other watch requests, which the server's counts
// cannot, and checks them.
//
// A Traffic is safe for use by several goroutines and may be attached to
// several clients.
type Traffic struct {
	mu       sync.Mutex // guards sent and progress
	sent     map[string]int64
	progress int64
}

// TrafficCounts is a snapshot of a Traffic.
type TrafficCounts struct {
	// Sent counts the requests sent, by method name (Range, Watch, ...).
	Sent map[string]int64
	// Progress counts the watch progress requests, which Sent["Watch"]
	// includes.
	Progress int64
}

// Sub returns c minus d.
func (c TrafficCounts) Sub(d TrafficCounts) TrafficCounts {
	r := TrafficCounts{Sent: map[string]int64{}, Progress: c.Progress - d.Progress}
	for k, v := range c.Sent {
		if v -= d.Sent[k]; v != 0 {
			r.Sent[k] = v
		}
	}
	return r
}

// Total is the number of requests of every method.
func (c TrafficCounts) Total() int64 {
	var n int64
	for _, v := range c.Sent {
		n += v
	}
	return n
}

// Snapshot returns the counts so far.
func (t *Traffic) Snapshot() TrafficCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := TrafficCounts{Sent: map[string]int64{}, Progress: t.progress}
	for k, v := range t.sent {
		c.Sent[k] = v
	}
	return c
}

func (t *Traffic) count(method string, progress bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sent == nil {
		t.sent = map[string]int64{}
	}
	t.sent[path.Base(method)]++
	if progress {
		t.progress++
	}
}

// Option adds the Traffic's interceptors to a client configuration.
func (t *Traffic) Option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			t.count(method, false)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return s, err
			}
			return &countedStream{ClientStream: s, t: t, method: method}, nil
		}))
}

// countedStream counts the messages sent on one client stream.
type countedStream struct {
	grpc.ClientStream
	t      *Traffic
	method string
}

func (s *countedStream) SendMsg(m any) error {
	wr, ok := m.(*pb.WatchRequest)
	s.t.count(s.method, ok && wr.GetProgressRequest() != nil)
	return s.ClientStream.SendMsg(m)
}
