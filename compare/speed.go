package compare

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// SpeedOpts are each system's settings for the speed workloads.
type SpeedOpts struct {
	Duration time.Duration // per measurement
	TTL      time.Duration
	Retry    time.Duration // Redis polling interval
}

// Speed is one measurement: acquisitions per second and the latency of a
// cycle (uncontended) or of a handoff (contended).
type Speed struct {
	Sessions int
	Ops      int
	PerSec   float64
	P50, P99 time.Duration
	Errors   int
}

// RunSpeed measures sys with n lock clients on one lock name on the
// servers at addrs, directly (no proxy). n == 1 is the uncontended cycle:
// latency is Acquire plus Release. For n > 1 the latency is the handoff:
// from the moment a holder starts its Release to the moment the next
// Acquire returns.
func RunSpeed(ctx context.Context, sys string, addrs []string, n int, name string, o SpeedOpts) (Speed, error) {
	c, err := Dial(Config{System: sys, Addrs: addrs, TTL: o.TTL, Retry: o.Retry})
	if err != nil {
		return Speed{}, err
	}
	defer c.Close()
	locks := make([]Lock, n)
	for i := range locks {
		if locks[i], err = c.NewLock(ctx, name); err != nil {
			return Speed{}, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var (
		mu       sync.Mutex // guards lats
		lats     []time.Duration
		released atomic.Int64 // unix nanos when the last Release began
		errs     atomic.Int64
		ops      atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	for _, lk := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				t0 := time.Now()
				if err := lk.Acquire(rctx); err != nil {
					if rctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				got := time.Now()
				var lat time.Duration
				if n > 1 {
					if r := released.Load(); r != 0 {
						lat = got.Sub(time.Unix(0, r))
					}
				}
				released.Store(time.Now().UnixNano())
				relCtx, rc := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				err := lk.Release(relCtx)
				rc()
				if err != nil {
					errs.Add(1)
				}
				if n == 1 {
					lat = time.Since(t0)
				}
				ops.Add(1)
				if lat > 0 {
					mu.Lock()
					lats = append(lats, lat)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	s := Speed{Sessions: n, Ops: int(ops.Load()), Errors: int(errs.Load())}
	s.PerSec = float64(s.Ops) / el.Seconds()
	slices.Sort(lats)
	if len(lats) > 0 {
		s.P50 = lats[len(lats)/2]
		s.P99 = lats[min(len(lats)-1, len(lats)*99/100)]
	}
	if s.Ops == 0 {
		return s, fmt.Errorf("compare: %s with %d sessions: no acquisition in %v (%d errors)", sys, n, o.Duration, s.Errors)
	}
	return s, nil
}
