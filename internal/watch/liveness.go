package watch

import (
	"time"
)

// This file holds how long the package trusts a connection that says
// nothing, which both of its checks of a silent connection use: the
// request layer's (internal/request), which sends a second attempt beside
// one left unanswered, and the watch streams' probe (stream.go).

// Liveness is how long the package trusts a connection to etcd that says
// nothing. A connection can go silent without a reset (a NAT or firewall
// that drops its state, a host that stops answering): bytes are accepted
// and nothing comes back. clientv3's default configuration has no gRPC
// keepalive, and its round-robin balancer keeps sending every other
// request to such a connection, while the session's renewals, each
// bounded, go on succeeding through the others. So no request waits for
// more than Wait without a second attempt beside it (see request.Ask),
// and no watch trusts a stream that has said nothing for Idle and then
// did not answer a progress request within Wait (see probe).
type Liveness struct {
	Idle time.Duration // a watch that heard nothing for this long asks for progress
	Wait time.Duration // how long an answer may take: a progress request's, or a request's before a second attempt (see request.Ask)
}

// LivenessFor is the liveness of a session with the given TTL: Idle a
// third of it (when the session renews its lease), between 1 s and 20 s;
// Wait a sixth, between 1 s and 5 s. A watch on a silent stream gives it
// up within 1.5 Idle plus 2 Wait (see probe): five sixths of the TTL, and
// 40 s. The caller passes the TTL it knows (a caller that knows none, such
// as a session on a missing lease, passes the default it would grant):
// a TTL of 0 or less is the shortest liveness, 1 s and 1 s.
func LivenessFor(ttl time.Duration) Liveness {
	return Liveness{Idle: min(max(ttl/3, time.Second), 20*time.Second), Wait: min(max(ttl/6, time.Second), 5*time.Second)}
}
