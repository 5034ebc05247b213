package lockbench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// This file holds what the disk-bound comparison (cmd/lockbench -disk)
// measures beyond the contended workload: the requests each package sends,
// by what they ask of the cluster (a commit through raft, or a
// linearizable read), and the members' own metrics, scraped from their
// /metrics pages around each window.

// Request kinds, as the server treats them: a write goes through raft (one
// log entry, applied on every member), a linearizable read waits for a
// ReadIndex round and the local apply, a serializable read is answered by
// the member alone.
const (
	KindWriteTxn    = "Txn, write (commit)"
	KindReadTxn     = "Txn, read-only (linearizable read)"
	KindSerialTxn   = "Txn, read-only serializable"
	KindRange       = "Range (linearizable read)"
	KindSerialRange = "Range, serializable"
	KindPut         = "Put (commit)"
	KindDelete      = "DeleteRange (commit)"
)

// Kinds counts the unary requests of the clients it is attached to, by
// kind (the constants above, or the gRPC method's name for the others).
// It is safe for use by several goroutines and may be attached to several
// clients.
type Kinds struct {
	mu sync.Mutex
	n  map[string]int64 // guarded by mu
}

// Option adds the Kinds interceptor to a client configuration.
func (k *Kinds) Option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(k.intercept))
}

func (k *Kinds) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	kind := requestKind(method, req)
	k.mu.Lock()
	if k.n == nil {
		k.n = map[string]int64{}
	}
	k.n[kind]++
	k.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// Snapshot returns the counts so far.
func (k *Kinds) Snapshot() map[string]int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int64, len(k.n))
	for kind, n := range k.n {
		out[kind] = n
	}
	return out
}

// SubKinds returns a minus b.
func SubKinds(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for kind, n := range a {
		if d := n - b[kind]; d != 0 {
			out[kind] = d
		}
	}
	return out
}

// requestKind says what the server does with req, sent to method.
func requestKind(method string, req any) string {
	switch r := req.(type) {
	case *pb.RangeRequest:
		if r.Serializable {
			return KindSerialRange
		}
		return KindRange
	case *pb.PutRequest:
		return KindPut
	case *pb.DeleteRangeRequest:
		return KindDelete
	case *pb.TxnRequest:
		if txnWrites(r) {
			return KindWriteTxn
		}
		// A read-only transaction is linearizable unless every range in
		// it is serializable (etcd's isTxnSerializable).
		if txnSerializable(r) {
			return KindSerialTxn
		}
		return KindReadTxn
	}
	return method[strings.LastIndexByte(method, '/')+1:]
}

// txnWrites reports whether a transaction may write, in either branch, at
// any depth: the server then proposes it through raft.
func txnWrites(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch x := op.Request.(type) {
			case *pb.RequestOp_RequestPut, *pb.RequestOp_RequestDeleteRange:
				return true
			case *pb.RequestOp_RequestTxn:
				if txnWrites(x.RequestTxn) {
					return true
				}
			}
		}
	}
	return false
}

func txnSerializable(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch x := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				if !x.RequestRange.Serializable {
					return false
				}
			case *pb.RequestOp_RequestTxn:
				if !txnSerializable(x.RequestTxn) {
					return false
				}
			}
		}
	}
	return true
}

// Metrics is one scrape of a member's /metrics page: every sample, by its
// series as printed (name{labels}), histograms' _sum and _count included.
type Metrics map[string]float64

// ScrapeMetrics reads the /metrics page of the member whose client URL is
// endpoint.
func ScrapeMetrics(ctx context.Context, endpoint string) (Metrics, error) {
	url := strings.TrimSuffix(endpoint, "/") + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("lockbench: GET %s: %s", url, resp.Status)
	}
	m := Metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lockbench: reading %s: %w", url, err)
	}
	return m, nil
}

// Sub returns m minus o, series by series (a gauge's change, a counter's
// increase).
func (m Metrics) Sub(o Metrics) Metrics {
	out := Metrics{}
	for k, v := range m {
		out[k] = v - o[k]
	}
	return out
}

// Add returns m plus o, series by series.
func (m Metrics) Add(o Metrics) Metrics {
	out := Metrics{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range o {
		out[k] += v
	}
	return out
}

// Sum adds up the series of metric name whose labels include every one of
// labels (each `key="value"`).
func (m Metrics) Sum(name string, labels ...string) float64 {
	var s float64
	for k, v := range m {
		n, ls, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(ls, l) {
				ok = false
				break
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

// LabelValues returns the values that label takes in the series of metric
// name, sorted.
func (m Metrics) LabelValues(name, label string) []string {
	seen := map[string]bool{}
	for k := range m {
		n, ls, ok := strings.Cut(k, "{")
		if n != name || !ok {
			continue
		}
		for _, l := range strings.Split(strings.TrimSuffix(ls, "}"), ",") {
			key, val, ok := strings.Cut(l, "=")
			if ok && key == label {
				if v, err := strconv.Unquote(val); err == nil {
					seen[v] = true
				}
			}
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}
