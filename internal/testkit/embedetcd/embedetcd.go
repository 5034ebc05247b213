// Package embedetcd starts real etcd members inside the current process, on
// loopback ports and in a temporary directory, for the tools of this module
// (the etcdlock demo, lockbench) that run without an external cluster.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/loopback"
)

// Cluster is a running in-process etcd cluster.
type Cluster struct {
	members []*embed.Etcd
	proxies []*etcdproc.Proxy
	dir     string
	// Endpoints are the members' client URLs, in member order.
	Endpoints []string
}

// Options change the cluster that StartWith starts.
type Options struct {
	// PeerDelay, if positive, makes commits slow: each member's peer
	// traffic reaches it through a loopback proxy that delays every byte by
	// PeerDelay (in both directions of each connection, which the member
	// that dials opens: a raft message and any answer on the same
	// connection each take PeerDelay longer). A commit waits for a quorum's
	// acknowledgements (one round trip: about 2 × PeerDelay more), and so
	// does the heartbeat round of a linearizable read.
	PeerDelay time.Duration
	// Dir, if not "", is the directory under which the members' data
	// directory is made (default: the system's temporary directory).
	Dir string
}

// Start starts an n-member cluster and returns once every member is ready
// to serve, or ctx ends. On error nothing is left running and the data
// directory is removed.
func Start(ctx context.Context, n int) (*Cluster, error) {
	return StartWith(ctx, n, Options{})
}

// StartWith is Start with options.
func StartWith(ctx context.Context, n int, o Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("embedetcd: %d members", n)
	}
	dir, err := os.MkdirTemp(o.Dir, "embedetcd")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	ports, err := loopback.Ports(2 * n)
	if err != nil {
		c.Close()
		return nil, err
	}
	var initial []string
	cfgs := make([]*embed.Config, n)
	for i := range cfgs {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])}
		peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		if o.PeerDelay > 0 {
			// The other members reach this one through its proxy.
			// The other members reach this one through a proxy that
			// delays every byte (etcdproc's, which the fault tests use
			// between clients and members).
			p, err := etcdproc.NewProxy(peer.Host)
			if err != nil {
				c.Close()
				return nil, err
			}
			p.Delay(o.PeerDelay)
			c.proxies = append(c.proxies, p)
			u, err := url.Parse(p.URL())
			if err != nil {
				c.Close()
				return nil, err
			}
			peer = *u
			cfg.AdvertisePeerUrls = []url.URL{peer}
		}
		cfg.InitialClusterToken = "embedetcd"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		// Loopback round trips are sub-millisecond: elect sooner than the defaults.
		cfg.TickMs, cfg.ElectionMs = 50, 500
		cfgs[i] = cfg
		initial = append(initial, fmt.Sprintf("%s=%s", cfg.Name, peer.String()))
		c.Endpoints = append(c.Endpoints, client.String())
	}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("embedetcd: start %s: %w", cfg.Name, err)
		}
		c.members = append(c.members, e)
	}
	for _, e := range c.members {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			c.Close()
			return nil, fmt.Errorf("embedetcd: %w", err)
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			c.Close()
			return nil, errors.New("embedetcd: members not ready after 30 s")
		}
	}
	return c, nil
}

// Term is the highest raft term among the members: it grows by one with
// each election, so its growth over a run counts the elections (leader
// changes, or attempts) the run met.
func (c *Cluster) Term() uint64 {
	var t uint64
	for _, e := range c.members {
		t = max(t, e.Server.Term())
	}
	return t
}

// Close stops the members and removes their data.
func (c *Cluster) Close() {
	for _, e := range c.members {
		e.Close()
	}
	c.members = nil
	for _, p := range c.proxies {
		p.Close()
	}
	c.proxies = nil
	os.RemoveAll(c.dir)
}
