package lockbench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The anatomy of a contended handoff is measured from outside the lock
// packages, so that neither is changed and both are measured alike:
//
//   - every unary RPC that a Lock or an Unlock sends carries, in its
//     context, the call log of the goroutine that called it (both packages
//     derive every request's context from the caller's), and a client
//     interceptor notes when it was sent, when it was answered and the
//     revision of its response header;
//   - a stream interceptor notes when each DELETE event of a watch reaches
//     the client's gRPC stream (before clientv3's goroutines hand it to the
//     watcher).
//
// Nothing of this runs outside the anatomy workload: its clients are its
// own (see Tracer.Option).

// Tracer records, through gRPC client interceptors, the unary RPCs of the
// calls whose context carries a call log (see withCallLog), and the time
// each watch DELETE event first reached any client it is attached to.
type Tracer struct {
	mu      sync.Mutex
	deletes map[deleted]time.Time // guarded by mu
}

// deleted names one deletion: its key and revision.
type deleted struct {
	key string
	rev int64
}

// Option adds the Tracer's interceptors to a client configuration.
func (t *Tracer) Option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainUnaryInterceptor(t.intercept),
		grpc.WithChainStreamInterceptor(t.interceptStream))
}

// rpcCall is one unary RPC of a traced call.
type rpcCall struct {
	sent, answered time.Time
	rev            int64 // of the response header; 0 on error
}

// callLog collects the unary RPCs of one goroutine's current call.
type callLog struct {
	mu    sync.Mutex
	calls []rpcCall // guarded by mu
}

// take returns the calls logged and empties the log.
func (l *callLog) take() []rpcCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

type callLogKey struct{}

func withCallLog(ctx context.Context, l *callLog) context.Context {
	return context.WithValue(ctx, callLogKey{}, l)
}

type headered interface{ GetHeader() *pb.ResponseHeader }

func (t *Tracer) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	l, _ := ctx.Value(callLogKey{}).(*callLog)
	if l == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c := rpcCall{sent: time.Now()}
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.answered = time.Now()
	if h, ok := reply.(headered); ok && err == nil && h.GetHeader() != nil {
		c.rev = h.GetHeader().Revision
	}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return err
}

func (t *Tracer) interceptStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != watchMethod {
		return s, err
	}
	return &tracedStream{ClientStream: s, t: t}, nil
}

// tracedStream notes the DELETE events of one watch stream.
type tracedStream struct {
	grpc.ClientStream
	t *Tracer
}

func (s *tracedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	wr, ok := m.(*pb.WatchResponse)
	if !ok || err != nil || len(wr.Events) == 0 {
		return err
	}
	at := time.Now()
	s.t.mu.Lock()
	if s.t.deletes == nil {
		s.t.deletes = map[deleted]time.Time{}
	}
	for _, ev := range wr.Events {
		d := deleted{string(ev.Kv.Key), ev.Kv.ModRevision}
		if _, seen := s.t.deletes[d]; ev.Type == mvccpb.DELETE && !seen {
			s.t.deletes[d] = at
		}
	}
	s.t.mu.Unlock()
	return err
}

// deletedAt returns when the deletion of key at rev first reached a client.
func (t *Tracer) deletedAt(key string, rev int64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.deletes[deleted{key, rev}]
	return at, ok
}

// Segments of a contended handoff, in the order they follow one another:
// from one holder's Unlock call to the next holder's Unlock call, which is
// one acquisition of the workload (they add up to its cycle).
const (
	SegDelete   = iota // holder's Unlock called → its delete answered (the delete's commit and apply, and the RPC)
	SegNotify          // delete answered → the delete's event at the next waiter's client (negative when the event came first)
	SegDispatch        // event at the client → the waiter's first read sent (clientv3's watch dispatch, the package's wait loop)
	SegRead            // first read sent → last read answered, before Lock returns (linearizable re-check(s))
	SegGrant           // last read answered → Lock returned (the package's grant)
	SegLoop            // Lock returned → that holder's Unlock called (the benchmark's loop)
	NumSegments
)

// SegmentNames name the segments, by index.
var SegmentNames = [NumSegments]string{
	"Unlock called → delete answered",
	"delete answered → event at waiter's client",
	"event → re-check read sent",
	"re-check sent → answered",
	"answered → Lock returned",
	"Lock returned → Unlock called",
}

// AnatomyResult is what Anatomy measured for one package and session
// count.
type AnatomyResult struct {
	Impl     string
	Sessions int
	// Segments holds, for each handoff that was traced whole (its delete
	// event seen, a read after it), the length of each segment.
	Segments [NumSegments][]time.Duration
	// Cycles are the traced handoffs' Unlock-to-Unlock times (the sum of
	// their segments).
	Cycles []time.Duration
	// Reads is the number of unary RPCs the next holder's Lock sent
	// after the event, summed over the traced handoffs.
	Reads int
	// Handoffs counts the handoffs of the window; NoEvent those whose
	// waiter got no event for the deletion (it found the predecessor gone
	// when its watch started, or it was not waiting yet).
	Handoffs, NoEvent int
	// Ops and Elapsed are the acquisitions and the window.
	Ops     int
	Elapsed time.Duration
	// ClientCPU and ServerCPU are the CPU time (user + system) that this
	// process and the server process (ServerPID, if known) used during the
	// window; ServerCPU is -1 if unknown.
	ClientCPU, ServerCPU time.Duration
}

// acquired is one acquisition of the anatomy workload.
type acquired struct {
	key                        string
	lockReturned, unlockCalled time.Time
	lockCalls, unlockCalls     []rpcCall
}

// Anatomy runs the contended workload (sessions sessions on one lock, each
// looping Lock and Unlock) on clients that t is attached to, and traces
// each handoff: see the Seg constants. serverPID, if not 0, is the process
// whose CPU time counts as the server's (the embedded members' process).
func Anatomy(ctx context.Context, env Env, t *Tracer, impl Impl, pfx string, sessions int, serverPID int, lim Limits) (AnatomyResult, error) {
	r := AnatomyResult{Impl: impl.Name, Sessions: sessions, ServerCPU: -1}
	_, err := withSessions(ctx, env, impl, pfx, sessions, func(ss []Session) (Result, error) {
		return Result{}, anatomy(ctx, env, t, impl, pfx, ss, serverPID, lim, &r)
	})
	return r, err
}

func anatomy(ctx context.Context, env Env, t *Tracer, impl Impl, pfx string, ss []Session, serverPID int, lim Limits, r *AnatomyResult) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		acqs = map[int64]*acquired{} // by generation; guarded by mu
		gen  atomic.Int64
		t0   time.Time
		t1   atomic.Int64 // UnixNano when the window closed
		c0   time.Duration
		s0   time.Duration
	)
	var once sync.Once
	c1, s1 := c0, s0
	halt := func() {
		once.Do(func() {
			t1.Store(time.Now().UnixNano())
			c1, s1 = cpuTime(os.Getpid()), cpuTime(serverPID)
			cancel()
		})
	}
	w := openWhenQueued(wctx, env.client(0), pfx, len(ss), lim.Duration, halt, func() {
		t0, c0, s0 = time.Now(), cpuTime(os.Getpid()), cpuTime(serverPID)
	})
	defer w.wait()
	err := each(ss, halt, func(s Session) error {
		m := impl.NewMutex(s, pfx)
		keyed, ok := m.(interface{ Key() string })
		if !ok {
			return fmt.Errorf("lockbench: %s's Mutex has no Key method", impl.Name)
		}
		var lockLog, unlockLog callLog
		for wctx.Err() == nil {
			if err := m.Lock(withCallLog(wctx, &lockLog)); err != nil {
				if wctx.Err() != nil {
					return nil // the window closed while waiting
				}
				return fmt.Errorf("%s: Lock: %w", impl.Name, err)
			}
			a := &acquired{lockReturned: time.Now(), key: keyed.Key(), lockCalls: lockLog.take()}
			if w.isOpen() && wctx.Err() == nil {
				g := gen.Add(1)
				if lim.MaxOps > 0 && g >= int64(lim.MaxOps) {
					halt()
				}
				mu.Lock()
				acqs[g] = a
				mu.Unlock()
			}
			a.unlockCalled = time.Now()
			err := unlock(withCallLog(ctx, &unlockLog), impl, m)
			a.unlockCalls = unlockLog.take()
			if err != nil {
				return err
			}
			if lim.Pause > 0 {
				select {
				case <-time.After(lim.Pause):
				case <-wctx.Done():
				}
			}
		}
		return nil
	})
	w.wait()
	if err != nil {
		return err
	}
	r.Ops, r.Elapsed = int(gen.Load()), time.Unix(0, t1.Load()).Sub(t0)
	r.ClientCPU = c1 - c0
	if s0 >= 0 && s1 >= 0 {
		r.ServerCPU = s1 - s0
	}
	for g := int64(1); g < gen.Load(); g++ {
		a, b := acqs[g], acqs[g+1]
		r.Handoffs++
		if len(a.unlockCalls) == 0 {
			continue
		}
		del := a.unlockCalls[len(a.unlockCalls)-1]
		ev, ok := t.deletedAt(a.key, del.rev)
		if !ok || del.rev == 0 {
			r.NoEvent++
			continue
		}
		var sent, answered time.Time
		reads := 0
		for _, c := range b.lockCalls {
			if c.sent.After(ev) && !c.answered.After(b.lockReturned) {
				if reads == 0 {
					sent = c.sent
				}
				answered = c.answered
				reads++
			}
		}
		if reads == 0 {
			r.NoEvent++
			continue
		}
		r.Reads += reads
		seg := [NumSegments]time.Duration{
			SegDelete:   del.answered.Sub(a.unlockCalled),
			SegNotify:   ev.Sub(del.answered),
			SegDispatch: sent.Sub(ev),
			SegRead:     answered.Sub(sent),
			SegGrant:    b.lockReturned.Sub(answered),
			SegLoop:     b.unlockCalled.Sub(b.lockReturned),
		}
		for i, d := range seg {
			r.Segments[i] = append(r.Segments[i], d)
		}
		r.Cycles = append(r.Cycles, b.unlockCalled.Sub(a.unlockCalled))
	}
	return nil
}

// Traced is the number of handoffs traced whole.
func (r AnatomyResult) Traced() int { return len(r.Cycles) }

// PerSec is the acquisitions per second of the window.
func (r AnatomyResult) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Summary returns the mean, p50 and p99 of ds (nearest rank).
func Summary(ds []time.Duration) (avg, p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return mean(s), rank(s, 50), rank(s, 99)
}

// cpuTime returns the user and system CPU time process pid has used, read
// from /proc/<pid>/stat, or -1 if pid is 0 or it cannot be read. For this
// process it asks getrusage, which is finer.
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return -1
	}
	if pid == os.Getpid() {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return -1
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// fields count from after its closing one. utime and stime are
	// fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(u+st) * (time.Second / 100)
}
