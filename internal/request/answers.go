package request

import (
	"sync/atomic"
	"time"
)

// This file holds what one client's requests have shown lately: the
// evidence that Ask weighs to tell a lost attempt from a slow one.

// Classes of requests, for the evidence that one is lost: a write
// (anything that goes through etcd's log: a put, a delete, a write
// transaction, a lease grant or revoke) is answered only once the cluster
// has committed it, which a slow disk delays; a read is not. A renewal
// (a keepalive) is answered by the leader's lessor, which a busy leader
// or a congested stream delays while reads, served by any member, are
// answered at once. So only a later write answered is evidence that a
// write is lost, only a later renewal that a renewal is, while any later
// request answered is evidence that a read is.
const (
	Read = iota
	Write
	Renew
	numClasses
)

// Answers is what one client's requests have shown lately (see Ask). The
// zero value is ready to use; one client's requests share one.
type Answers struct {
	// sent is, by class, when the request sent last of those answered
	// was sent (nanoseconds since epoch, see now).
	sent [numClasses]atomic.Int64
	// took is, by class, how long the last answered request took, and
	// tookAt when it was answered (as sent).
	took   [numClasses]atomic.Int64
	tookAt [numClasses]atomic.Int64
}

// epoch is the origin of the monotonic times that Answers keep.
var epoch = time.Now()

// now is the time since epoch, on the monotonic clock.
func now() int64 { return int64(time.Since(epoch)) }

// answered records an answer to a request of class c sent at sent.
func (a *Answers) answered(c int, sent int64) {
	t := now()
	for {
		old := a.sent[c].Load()
		if old >= sent || a.sent[c].CompareAndSwap(old, sent) {
			break
		}
	}
	a.took[c].Store(t - sent)
	a.tookAt[c].Store(t)
}

// lost reports whether an attempt of class c sent at sent, which has
// waited for waited, is most likely lost on a silent connection rather
// than slow, for a request whose liveness wait is d, and whose newer
// attempt, beside it, has waited for newer. Never before d. A request of
// its class (or, for a read, of any class) sent after it, by more
// than d/4, has been answered: the connections answer its kind faster.
// Or, for a write: a read sent after it has been answered (the
// connections answer), it has waited more than four times what the last
// write answered since it was sent took (with none, this says nothing),
// and its newer attempt has waited d too: a cluster that has just turned
// slow answers the older attempt first.
//
// Every piece of evidence is about the time since the attempt was sent:
// what other operations in flight on the client show. A write's latency
// measured before the attempt was sent (before the cluster turned slow)
// says nothing about it, and with other operations' reads answered
// meanwhile it gave up every write of a slow cluster before its answer
// came (issue 50: 12 to 14 writes per operation with 8 in flight).
func (a *Answers) lost(c int, sent int64, waited, newer, d time.Duration) bool {
	if waited < d {
		return false
	}
	after := sent + int64(d/4)
	switch {
	case a.sent[c].Load() > after:
		return true
	case c == Read:
		return a.sent[Write].Load() > after || a.sent[Renew].Load() > after
	case c != Write:
		return false
	}
	r := a.answeredSince(Write, sent)
	return r > 0 && waited > 4*r && newer >= d && a.sent[Read].Load() > after
}

// answeredSince is how long the last answered request of class c took,
// if it was answered after since (see now); 0 if it was not.
func (a *Answers) answeredSince(c int, since int64) time.Duration {
	if a.tookAt[c].Load() > since {
		return time.Duration(a.took[c].Load())
	}
	return 0
}

// recentWindow is how long an answer's latency counts as what the
// cluster takes now.
const recentWindow = time.Minute

// recently is how long the last answered request of class c took, if it
// was answered within recentWindow; 0 if none was.
func (a *Answers) recently(c int) time.Duration {
	if at := a.tookAt[c].Load(); at != 0 && now()-at < int64(recentWindow) {
		return time.Duration(a.took[c].Load())
	}
	return 0
}
