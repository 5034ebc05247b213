package concurrency

import (
	"time"
)

// This file holds how long the package trusts a connection that says
// nothing, which both of its checks of a silent connection use: the
// request layer's (request.go), which sends a second attempt beside one
// left unanswered, and the watch streams' probe (stream.go).

// liveness is how long the package trusts a connection to etcd that says
// nothing. A connection can go silent without a reset (a NAT or firewall
// that drops its state, a host that stops answering): bytes are accepted
// and nothing comes back. clientv3's default configuration has no gRPC
// keepalive, and its round-robin balancer keeps sending every other
// request to such a connection, while the session's renewals, each
// bounded, go on succeeding through the others. So no request waits for
// more than wait without a second attempt beside it (see ask), and no
// watch trusts a stream that has said nothing for idle and then did not
// answer a progress request within wait (see probe).
type liveness struct {
	idle time.Duration // a watch that heard nothing for this long asks for progress
	wait time.Duration // how long an answer may take: a progress request's, or a request's before a second attempt (see ask)
}

// livenessFor is the liveness of a session with the given TTL: idle a
// third of it (when the session renews its lease), between 1 s and 20 s;
// wait a sixth, between 1 s and 5 s. A watch on a silent stream gives it
// up within 1.5 idle plus 2 wait (see probe): five sixths of the TTL, and
// 40 s. A session that knows no TTL (WithLease on a missing lease) counts
// the default.
func livenessFor(ttl time.Duration) liveness {
	if ttl <= 0 {
		ttl = defaultSessionTTL * time.Second
	}
	return liveness{idle: min(max(ttl/3, time.Second), 20*time.Second), wait: min(max(ttl/6, time.Second), 5*time.Second)}
}
