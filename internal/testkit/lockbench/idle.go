package lockbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// IdleResult is what Idle measured: the traffic that idle holds and waits
// cost, with nothing happening to their locks.
type IdleResult struct {
	Impl string
	// Clients is the number of clients the sessions were spread over, TTL
	// the sessions' TTL in seconds.
	Clients, TTL int
	// Holds is the number of locks held, each by a session of its own, and
	// as many waiters wait, each on a session of its own, one behind each
	// hold: 2×Holds sessions.
	Holds int
	// Window is how long the traffic was counted, with every hold and wait
	// in place and idle.
	Window time.Duration
	// Server is what the cluster's gRPC servers received over the window,
	// by method; ServerErr says why it is missing, if it is.
	Server    ServerMsgs
	ServerErr string
	// Client is what the clients sent over the window (see Traffic).
	Client TrafficCounts
	// Watchers and WatchStreams are the server's watchers and watch
	// streams above the baseline taken before the sessions opened, read
	// as the window opened.
	Watchers, WatchStreams float64
}

// HoldsAndWaits is the number of idle holds and waits.
func (r IdleResult) HoldsAndWaits() int { return 2 * r.Holds }

// PerThousandPerMinute scales n requests counted over the window to
// requests per minute per 1,000 idle holds and waits.
func (r IdleResult) PerThousandPerMinute(n float64) float64 {
	if r.Window <= 0 || r.Holds == 0 {
		return 0
	}
	return n / r.Window.Minutes() * 1000 / float64(r.HoldsAndWaits())
}

// PerClientPerMinute scales n requests counted over the window to
// requests per minute per client.
func (r IdleResult) PerClientPerMinute(n float64) float64 {
	if r.Window <= 0 || r.Clients == 0 {
		return 0
	}
	return n / r.Window.Minutes() / float64(r.Clients)
}

// Idle measures what idle holds and waits cost the cluster. It opens
// 2×holds sessions of ttl seconds, spread round robin over env's clients;
// each of the first holds sessions takes a lock of its own and asks for
// the hold's notice (impl.Lost: this package's Mutex.Ctx, which watches
// the hold's key; etcd's package has no such context, and its Session.Done
// costs nothing), and each of the others queues a Lock behind one of those
// holds. Once every key is in etcd and the clients have gone quiet, it
// counts for window what the servers receive (server, by method) and what
// the clients send (traffic, which must be attached to env's clients), and
// fails if a hold is lost or a wait ends meanwhile. Then the waits are
// cancelled, the holds released and the sessions closed, and no key may be
// left under pfx.
func Idle(ctx context.Context, env Env, traffic *Traffic, server ServerCount, impl Impl, pfx string, holds, ttl int, window time.Duration) (r IdleResult, err error) {
	r = IdleResult{Impl: impl.Name, Clients: len(env.Clients), TTL: ttl, Holds: holds}
	if holds < 1 || window <= 0 {
		return r, fmt.Errorf("lockbench: Idle: %d holds, window %v", holds, window)
	}
	var base, baseStreams float64
	if env.Watchers != nil {
		if base, err = env.Watchers(ctx); err != nil {
			return r, err
		}
	}
	if env.WatchStreams != nil {
		if baseStreams, err = env.WatchStreams(ctx); err != nil {
			return r, err
		}
	}
	ss, err := openSessions(ctx, env, impl, 2*holds, ttl)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, closeSessions(ctx, env, ss, pfx)) }()

	// The holds: one lock each, watched where the package can.
	var held []Mutex
	var lost []<-chan struct{}
	release := func() error {
		var errs []error
		for _, m := range held {
			errs = append(errs, unlock(ctx, impl, m))
		}
		held = nil
		return errors.Join(errs...)
	}
	for i := range holds {
		m := impl.NewMutex(ss[i], fmt.Sprintf("%s/%d", pfx, i))
		if err := m.Lock(ctx); err != nil {
			return r, errors.Join(fmt.Errorf("%s: holder Lock: %w", impl.Name, err), release())
		}
		held = append(held, m)
		lost = append(lost, impl.Lost(ss[i], m))
	}

	// The waits: one queued behind each hold, until wctx ends.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	waitErrs := make([]error, holds)
	waitEnded := make(chan int, holds)
	for i := range holds {
		m := impl.NewMutex(ss[holds+i], fmt.Sprintf("%s/%d", pfx, i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.Lock(wctx)
			if err == nil {
				// It should not hold: let go at once, and say so below.
				err = errors.Join(errors.New("a waiter got a held lock"), unlock(ctx, impl, m))
			}
			waitErrs[i] = err
			waitEnded <- i
		}()
	}
	// endWaits cancels the waits and checks that each ended by the
	// cancellation, and nothing else.
	endWaits := func() error {
		cancel()
		wg.Wait()
		var errs []error
		bad := 0
		for i, err := range waitErrs {
			if !errors.Is(err, context.Canceled) {
				if bad++; bad <= 3 {
					errs = append(errs, fmt.Errorf("%s: waiter %d: Lock = %v, want context.Canceled", impl.Name, i, err))
				}
			}
		}
		if bad > 3 {
			errs = append(errs, fmt.Errorf("%s: %d waiters in all ended otherwise than by their cancellation", impl.Name, bad))
		}
		return errors.Join(errs...)
	}

	err = poll(ctx, 20*time.Millisecond, func() (bool, error) {
		n, err := countKeys(ctx, env.client(0), pfx)
		return n == int64(2*holds), err
	})
	if err == nil {
		err = settleTraffic(ctx, traffic, 500*time.Millisecond)
	}
	if err == nil && env.Watchers != nil {
		var w float64
		w, err = env.Watchers(ctx)
		r.Watchers = w - base
	}
	if err == nil && env.WatchStreams != nil {
		var w float64
		w, err = env.WatchStreams(ctx)
		r.WatchStreams = w - baseStreams
	}
	var s0 ServerMsgs
	if err == nil && server != nil {
		if s0, err = server(ctx); err != nil {
			r.ServerErr, server, err = err.Error(), nil, nil
		}
	}
	if err != nil {
		return r, errors.Join(err, endWaits(), release())
	}

	// The window: nothing happens to any lock.
	c0, t0 := traffic.Snapshot(), time.Now()
	err = idleWindow(ctx, impl, window, lost, waitEnded)
	r.Window = time.Since(t0)
	r.Client = traffic.Snapshot().Sub(c0)
	if err == nil && server != nil {
		var s1 ServerMsgs
		if s1, err = server(ctx); err != nil {
			r.ServerErr, err = err.Error(), nil
		} else {
			r.Server = s1.Sub(s0)
		}
	}
	return r, errors.Join(err, endWaits(), release())
}

// keepAliveMethod is the method name of lease keepalives.
const keepAliveMethod = "LeaseKeepAlive"

// idleWindow waits for d, and fails if a hold is lost or a wait ends
// meanwhile.
func idleWindow(ctx context.Context, impl Impl, d time.Duration, lost []<-chan struct{}, waitEnded <-chan int) error {
	// One goroutine per hold would do; a poll is enough for a minute.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case i := <-waitEnded:
			return fmt.Errorf("%s: waiter %d stopped waiting during the idle window", impl.Name, i)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		for i, c := range lost {
			select {
			case <-c:
				return fmt.Errorf("%s: hold %d lost during the idle window", impl.Name, i)
			default:
			}
		}
	}
	return nil
}

// settleTraffic waits until t has counted no request for quiet but the
// periodic ones of idle sessions, holds and waits (lease keepalives and
// watch progress requests): the setup's reads, writes and watches are
// done.
func settleTraffic(ctx context.Context, t *Traffic, quiet time.Duration) error {
	busy := func() int64 {
		c := t.Snapshot()
		return c.Total() - c.Sent[keepAliveMethod] - c.Progress
	}
	last, since := busy(), time.Now()
	return poll(ctx, quiet/10, func() (bool, error) {
		if n := busy(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= quiet, nil
	})
}
