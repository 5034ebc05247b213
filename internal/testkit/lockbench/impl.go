// Package lockbench holds the workloads that compare this module's lock
// package with etcd's go.etcd.io/etcd/client/v3/concurrency on the same
// cluster in the same run: cmd/lockbench prints them as a table, and the Go
// benchmarks of the module root run the main cases under testing.B.
//
// A workload talks to etcd only through the clients it is given, keeps to
// its own key prefix, closes every session it opens, and checks that its
// prefix is empty when it returns. Every loop stops at a count and at a
// time, whichever comes first.
package lockbench

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
)

// Session is what a workload needs of a session: both packages' Session
// types have these methods.
type Session interface {
	Close() error
	Lease() clientv3.LeaseID
}

// Mutex is what a workload needs of a mutex: both packages' Mutex types have
// these methods.
type Mutex interface {
	Lock(ctx context.Context) error
	TryLock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// Impl is one lock package under test.
type Impl struct {
	// Name labels the package in results ("ours", "etcd").
	Name string
	// NewSession opens a session with a lease of ttl seconds on c; ctx
	// bounds the call and the session's life.
	NewSession func(ctx context.Context, c *clientv3.Client, ttl int) (Session, error)
	NewMutex   func(s Session, pfx string) Mutex
	// ErrLocked is the error TryLock returns when the lock is held.
	ErrLocked error
	// Lost returns the channel that tells the holder of m on s that its hold
	// has ended, as a program using the package would wait for it. It is
	// called right after Lock returns.
	Lost func(s Session, m Mutex) <-chan struct{}
	// LostSignal names what Lost waits on, for reports.
	LostSignal string
	// Permits is how many may hold the lock at once: 0 or 1 for a mutex,
	// the limit for a semaphore, whose NewMutex returns it as a Mutex
	// (for a weighted one, the limit divided by the weight).
	Permits int
	// Weight is the permits each acquisition of a weighted semaphore
	// takes (AcquireN); 0 otherwise.
	Weight int
}

// Ours is this module's package.
var Ours = Impl{
	Name: "ours",
	NewSession: func(ctx context.Context, c *clientv3.Client, ttl int) (Session, error) {
		return concurrency.NewSession(c, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	},
	NewMutex: func(s Session, pfx string) Mutex {
		return concurrency.NewMutex(s.(*concurrency.Session), pfx)
	},
	ErrLocked:  concurrency.ErrLocked,
	Lost:       func(_ Session, m Mutex) <-chan struct{} { return m.(*concurrency.Mutex).Ctx().Done() },
	LostSignal: "Mutex.Ctx().Done()",
}

// Etcd is etcd's package, go.etcd.io/etcd/client/v3/concurrency.
var Etcd = Impl{
	Name: "etcd",
	NewSession: func(ctx context.Context, c *clientv3.Client, ttl int) (Session, error) {
		return etcdconc.NewSession(c, etcdconc.WithTTL(ttl), etcdconc.WithContext(ctx))
	},
	NewMutex: func(s Session, pfx string) Mutex {
		return etcdconc.NewMutex(s.(*etcdconc.Session), pfx)
	},
	ErrLocked:  etcdconc.ErrLocked,
	Lost:       func(s Session, _ Mutex) <-chan struct{} { return s.(*etcdconc.Session).Done() },
	LostSignal: "Session.Done()",
}

// OursSemaphore is this module's Semaphore with limit permits, as a Mutex:
// Lock is Acquire, Unlock Release, TryLock TryAcquire. Each Mutex it
// returns is a Semaphore of its own, which holds at most one permit. etcd's
// package has no semaphore.
func OursSemaphore(limit int) Impl {
	i := Ours
	i.Permits = limit
	i.NewMutex = func(s Session, pfx string) Mutex {
		return semMutex{concurrency.NewSemaphore(s.(*concurrency.Session), pfx, limit), 0}
	}
	i.Lost = func(_ Session, m Mutex) <-chan struct{} { return m.(semMutex).Ctx().Done() }
	i.LostSignal = "Semaphore.Ctx().Done()"
	return i
}

// OursWeightedSemaphore is this module's Semaphore with limit permits, as a
// Mutex whose Lock is AcquireN(ctx, weight), TryLock TryAcquireN: as many
// hold at once as OursSemaphore(limit/weight), so that the two compare
// the cost of weights alone.
func OursWeightedSemaphore(limit, weight int) Impl {
	i := OursSemaphore(limit)
	i.Permits, i.Weight = limit/weight, weight
	i.NewMutex = func(s Session, pfx string) Mutex {
		return semMutex{concurrency.NewSemaphore(s.(*concurrency.Session), pfx, limit), weight}
	}
	return i
}

// semMutex is a Semaphore as a Mutex; weight 0 takes one permit with
// Acquire, any other that many with AcquireN.
type semMutex struct {
	*concurrency.Semaphore
	weight int
}

func (m semMutex) Lock(ctx context.Context) error {
	if m.weight == 0 {
		return m.Acquire(ctx)
	}
	return m.AcquireN(ctx, m.weight)
}

func (m semMutex) TryLock(ctx context.Context) error {
	if m.weight == 0 {
		return m.TryAcquire(ctx)
	}
	return m.TryAcquireN(ctx, m.weight)
}

func (m semMutex) Unlock(ctx context.Context) error { return m.Release(ctx) }

// Named returns the package called name ("ours" or "etcd").
func Named(name string) (Impl, bool) {
	for _, i := range []Impl{Ours, Etcd} {
		if i.Name == name {
			return i, true
		}
	}
	return Impl{}, false
}

// OursWithMetrics is this module's package with its Prometheus metrics on,
// reporting to m: the metrics overhead is this ÷ Ours.
func OursWithMetrics(m concurrency.MetricsRecorder) Impl {
	i := Ours
	i.Name = "ours+metrics"
	i.NewSession = func(ctx context.Context, c *clientv3.Client, ttl int) (Session, error) {
		return concurrency.NewSession(c, concurrency.WithTTL(ttl), concurrency.WithContext(ctx), concurrency.WithMetrics(m))
	}
	return i
}
