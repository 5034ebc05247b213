package historycheck

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Invariants that the package promises: any violation is a bug.
const (
	Exclusion   = "mutex exclusion by revision"
	CreateOrder = "holds in create-revision order"
	GuardedTxn  = "guarded writes inside their hold"
	Counter     = "guarded counter exact"
	FenceStore  = "fenced store: increasing tokens, no lost update"
	OneLeader   = "one leader per term"
	LeaderRead  = "Leader() is the oldest candidate"
	Returned    = "every call returned"
	NoKeysLeft  = "no keys or leases left"
	NoLeaks     = "no goroutine leaks"
	Complete    = "history complete"
	// Liveness on a silent connection (issue 27), checked by the fault
	// tests inside the windows of their half-open fault.
	WaiterLive = "half-open: no waiter blocked on a free lock"
	HoldEnds   = "half-open: no hold outlives its key"
	// Queues of package recipes (the queue workloads of the fault tests).
	QueueNoLoss = "queue: no element lost"
	QueueNoDup  = "queue: no element returned twice (beyond ErrClaimUnknown)"
	// Work queues of package recipes (the workq workload, issue 53).
	WorkQueueNoLoss = "work queue: every item put is acked once, dead-lettered or still queued"
	WorkQueueClaim  = "work queue: no item delivered again while its claim lives; acks inside their claim"
	WorkQueueOnce   = "work queue: effects through the ack transaction applied exactly once"
	// Barriers, double barriers and latches of package recipes.
	BarrierEarly = "barriers: none released early"
	BarrierLate  = "half-open: no barrier released late"
)

// Guarded lists the invariants that must have zero violations, in the order
// of the report.
var Guarded = []string{Exclusion, CreateOrder, SemLimit, SemWeight, RWExclude, ReadStable, GuardedTxn, Counter, FenceStore, OneLeader, LeaderRead, WaiterLive, HoldEnds, QueueNoLoss, QueueNoDup, WorkQueueNoLoss, WorkQueueClaim, WorkQueueOnce, BarrierEarly, BarrierLate, Linearizable, Agree, Returned, NoKeysLeft, NoLeaks, Complete}

// Measures of the unguarded control: reported, never asserted, because a
// lock without fencing cannot prevent them.
const (
	Overlap       = "unguarded: holds overlapping in wall-clock time"
	UnguardedLost = "unguarded: lost updates"
)

// Report is the outcome of a check.
type Report struct {
	Checked    map[string]int      // invariant -> items checked
	Violations map[string][]string // invariant -> one line per violation
	Measured   map[string]int      // reported measures (Overlap, UnguardedLost)
}

// NewReport returns an empty report.
func NewReport() *Report {
	return &Report{Checked: map[string]int{}, Violations: map[string][]string{}, Measured: map[string]int{}}
}

// Violate records a violation of invariant inv.
func (r *Report) Violate(inv, format string, args ...any) {
	r.Violations[inv] = append(r.Violations[inv], fmt.Sprintf(format, args...))
}

// Total is the number of violations of guarded invariants.
func (r *Report) Total() int {
	n := 0
	for _, inv := range Guarded {
		n += len(r.Violations[inv])
	}
	return n
}

// Table formats the invariants as a Markdown table.
func (r *Report) Table() string {
	var b strings.Builder
	b.WriteString("| invariant | checked | violations |\n|---|---:|---:|\n")
	for _, inv := range Guarded {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", inv, r.Checked[inv], len(r.Violations[inv]))
	}
	for _, m := range []string{Overlap, UnguardedLost} {
		fmt.Fprintf(&b, "| %s (control, not asserted) | %d | %d |\n", m, r.Checked[m], r.Measured[m])
	}
	return b.String()
}

// KeyEvent is a change of a key under a lock or election prefix, as a watch
// started before the run saw it.
type KeyEvent struct {
	Key       string
	Delete    bool
	Rev       int64 // the event's revision
	CreateRev int64 // the key's create revision (puts only)
	Lease     int64
	Value     string // the value put (puts only)
}

// lifetime is one incarnation of a key: [created, deleted).
type lifetime struct {
	key              string
	lease            int64
	created, deleted int64 // deleted is 0 while the key exists
	// values are the key's values in revision order, each from the
	// revision of its put: a semaphore's weight and limit.
	values []valueAt
	// first is the revision from which a weighted semaphore's key held
	// by the rule, -1 if never, 0 until computed (see firstHold).
	first int64
}

// valueAt is a value of a key from revision rev.
type valueAt struct {
	rev int64
	v   string
}

// valueAt is l's value at revision rev: the last put at or before it.
func (l *lifetime) valueAt(rev int64) string {
	v := ""
	for _, x := range l.values {
		if x.rev > rev {
			break
		}
		v = x.v
	}
	return v
}

func (l *lifetime) aliveAt(rev int64) bool {
	return l.created <= rev && (l.deleted == 0 || rev < l.deleted)
}

func (l *lifetime) String() string {
	end := "end"
	if l.deleted != 0 {
		end = fmt.Sprint(l.deleted)
	}
	return fmt.Sprintf("%q lease %x [%d, %s)", l.key, l.lease, l.created, end)
}

// Timeline is the lifetimes of the keys of one queue (a lock or an
// election), rebuilt from a watch.
type Timeline struct {
	byCreate map[int64]*lifetime
	sorted   []*lifetime // by create revision
	changes  []int64     // revisions of deletions and of new values, in order
}

// NewTimeline rebuilds a queue from its events, in revision order. An event
// that does not fit (a delete of a key not seen created, a key created
// without an event) means the watch missed something, and is recorded as a
// violation of Complete under name.
func NewTimeline(r *Report, name string, events []KeyEvent) *Timeline {
	t := &Timeline{byCreate: map[int64]*lifetime{}}
	alive := map[string]*lifetime{}
	for _, ev := range events {
		r.Checked[Complete]++
		l := alive[ev.Key]
		switch {
		case ev.Delete && l == nil:
			r.Violate(Complete, "%s: delete of %q at %d, which the watch never saw created", name, ev.Key, ev.Rev)
		case ev.Delete:
			l.deleted = ev.Rev
			delete(alive, ev.Key)
			t.changes = append(t.changes, ev.Rev)
		case l != nil && l.created == ev.CreateRev:
			// A new value (Proclaim, Campaign's value, a semaphore's
			// resize) on the same key.
			l.values = append(l.values, valueAt{ev.Rev, ev.Value})
			t.changes = append(t.changes, ev.Rev)
		case l != nil:
			r.Violate(Complete, "%s: %q created at %d while its incarnation of %d was never seen deleted", name, ev.Key, ev.CreateRev, l.created)
		case ev.CreateRev != ev.Rev:
			r.Violate(Complete, "%s: first event of %q at %d, but it was created at %d", name, ev.Key, ev.Rev, ev.CreateRev)
		default:
			l = &lifetime{key: ev.Key, lease: ev.Lease, created: ev.CreateRev, values: []valueAt{{ev.Rev, ev.Value}}}
			alive[ev.Key] = l
			t.byCreate[l.created] = l
			t.sorted = append(t.sorted, l)
		}
	}
	sort.Slice(t.sorted, func(i, j int) bool { return t.sorted[i].created < t.sorted[j].created })
	return t
}

// oldestAt returns the key that held the queue at revision rev: the
// oldest one that existed then, or nil.
func (t *Timeline) oldestAt(rev int64) *lifetime {
	for _, l := range t.sorted {
		if l.created > rev {
			return nil
		}
		if l.aliveAt(rev) {
			return l
		}
	}
	return nil
}

// CheckHolds checks the acquisitions (ops of function acquire: FLock or
// FCampaign) of one queue against its timeline: each one's token is the
// create revision of its key, the key existed and was the oldest at the
// revision of the read that granted it, and, ordered by that revision, the
// holds never overlap and their tokens increase. Violations are recorded
// under excl and order. It also checks that every guarded write (FIncr ok)
// of the same ops committed while its hold was current, and that every
// leader read (FLeader ok) returned the oldest key of its revision.
func CheckHolds(r *Report, name string, ops []Op, acquire string, t *Timeline, excl, order string) {
	type held struct {
		op Op
		l  *lifetime
	}
	var holds []held
	for _, op := range ops {
		if op.Type != OK {
			continue
		}
		switch op.F {
		case acquire:
			r.Checked[excl]++
			l := t.byCreate[op.Token]
			switch {
			case l == nil || l.key != op.Key:
				r.Violate(excl, "%s: %s acquired %q with token %d, which is not the create revision of that key in etcd", name, op.Client, op.Key, op.Token)
				continue
			case !l.aliveAt(op.Rev):
				r.Violate(excl, "%s: %s acquired at revision %d, when its key %v did not exist", name, op.Client, op.Rev, l)
			default:
				if o := t.oldestAt(op.Rev); o != l {
					r.Violate(excl, "%s: %s acquired %v at revision %d, when %v was older", name, op.Client, l, op.Rev, o)
				}
			}
			holds = append(holds, held{op, l})
		case FIncr:
			r.Checked[GuardedTxn]++
			l := t.byCreate[op.Token]
			if l == nil || !l.aliveAt(op.Rev) || t.oldestAt(op.Rev) != l {
				r.Violate(GuardedTxn, "%s: %s committed guarded write %s at revision %d outside its hold (token %d: %v; holder then: %v)", name, op.Client, op.ID, op.Rev, op.Token, l, t.oldestAt(op.Rev))
			}
		case FLeader:
			r.Checked[LeaderRead]++
			if o := t.oldestAt(op.Rev); o == nil || o.key != op.Key || o.created != op.Token {
				r.Violate(LeaderRead, "%s: %s read leader %q (create %d) at revision %d, when the oldest key was %v", name, op.Client, op.Key, op.Token, op.Rev, o)
			}
		}
	}
	sort.Slice(holds, func(i, j int) bool { return holds[i].op.Rev < holds[j].op.Rev })
	for i := 1; i < len(holds); i++ {
		prev, cur := holds[i-1], holds[i]
		r.Checked[order]++
		if cur.op.Token <= prev.op.Token {
			r.Violate(order, "%s: %s acquired token %d at revision %d, after %s acquired token %d at revision %d", name, cur.op.Client, cur.op.Token, cur.op.Rev, prev.op.Client, prev.op.Token, prev.op.Rev)
		}
		if prev.l.deleted == 0 || cur.op.Rev < prev.l.deleted {
			r.Violate(excl, "%s: holds overlap: %s from revision %d while %s held %v", name, cur.op.Client, cur.op.Rev, prev.op.Client, prev.l)
		}
	}
}

// CheckTerms checks that no two candidates won the same term: distinct
// successful Campaigns have distinct create revisions.
func CheckTerms(r *Report, name string, ops []Op) {
	winner := map[int64]string{}
	for _, op := range ops {
		if op.F != FCampaign || op.Type != OK {
			continue
		}
		r.Checked[OneLeader]++
		if w, ok := winner[op.Token]; ok {
			r.Violate(OneLeader, "%s: term %d won by both %s and %s", name, op.Token, w, op.Client)
		}
		winner[op.Token] = op.Client
	}
}

// CounterState is what the guarded counter's keys held after the run: the
// counter and, for each committed increment, the key its ID named, which
// the same transaction wrote with the new value.
type CounterState struct {
	Value int64
	Ops   map[string]int64 // increment ID -> value it wrote
}

// CheckCounter checks the guarded counter: every committed increment wrote
// a distinct value, they are exactly 1..Value (none lost, none doubled),
// every acknowledged increment committed, and none that failed did.
func CheckCounter(r *Report, ops []Op, st CounterState) {
	r.Checked[Counter]++
	by := map[int64]string{}
	for id, v := range st.Ops {
		if other, ok := by[v]; ok {
			r.Violate(Counter, "increments %s and %s both wrote %d: an update was lost", other, id, v)
		}
		by[v] = id
		if v < 1 || v > st.Value {
			r.Violate(Counter, "increment %s wrote %d, outside 1..%d", id, v, st.Value)
		}
	}
	if int64(len(st.Ops)) != st.Value {
		r.Violate(Counter, "counter is %d after %d committed increments", st.Value, len(st.Ops))
	}
	for _, op := range ops {
		if op.F != FIncr || op.Workload == "election" {
			continue
		}
		switch op.Type {
		case OK:
			r.Checked[Counter]++
			if v, ok := st.Ops[op.ID]; !ok || v != op.Value {
				r.Violate(Counter, "increment %s by %s acknowledged with %d, but etcd has %d (present: %v)", op.ID, op.Client, op.Value, v, ok)
			}
		case Fail:
			r.Checked[Counter]++
			if _, ok := st.Ops[op.ID]; ok {
				r.Violate(Counter, "increment %s by %s failed (%s) but was committed", op.ID, op.Client, op.Err)
			}
		}
	}
}

// StoreWrite is one write that the external store accepted, in the order
// it accepted them.
type StoreWrite struct {
	Resource string `json:"res"`
	Fenced   bool   `json:"fenced"`
	Token    int64  `json:"token"`
	Read     int64  `json:"read"`  // the value the writer had read
	Value    int64  `json:"value"` // the value it wrote: Read+1
	ID       string `json:"id"`
	Client   string `json:"client"`
}

// CheckStore checks the writes to one resource of the external store and
// returns how many updates were lost (a write based on a value that was no
// longer current). For a fenced resource, that and a token lower than one
// accepted before are violations of FenceStore, and so are an acknowledged
// write missing from the log and a rejected one present in it. For an
// unfenced resource (the control), the count is only measured.
func CheckStore(r *Report, ops []Op, log []StoreWrite, resource, workload string, fenced bool) int {
	var cur, high int64
	lost := 0
	ids := map[string]bool{}
	for _, w := range log {
		if w.Resource != resource {
			continue
		}
		ids[w.ID] = true
		if !fenced {
			r.Checked[UnguardedLost]++
		}
		if fenced {
			r.Checked[FenceStore]++
			if w.Token < high {
				r.Violate(FenceStore, "%s: accepted token %d from %s after token %d", resource, w.Token, w.Client, high)
			}
		}
		high = max(high, w.Token)
		if w.Read != cur {
			lost++
			if fenced {
				r.Violate(FenceStore, "%s: write %s by %s (token %d) was based on %d, but the value was %d: an update was lost", resource, w.ID, w.Client, w.Token, w.Read, cur)
			}
		}
		cur = w.Value
	}
	if !fenced {
		return lost
	}
	for _, op := range ops {
		if op.F != FWrite || op.Workload != workload {
			continue
		}
		switch {
		case op.Type == OK && !ids[op.ID]:
			r.Violate(FenceStore, "%s: write %s by %s acknowledged but not in the store's log", resource, op.ID, op.Client)
		case op.Type == Fail && ids[op.ID]:
			r.Violate(FenceStore, "%s: write %s by %s rejected (%s) but in the store's log", resource, op.ID, op.Client, op.Err)
		}
	}
	return lost
}

// Overlaps counts the holds of the ops of one lock, by wall-clock time from
// Lock's return to Unlock's call (or the client's last op), that began
// while a hold of another client had not ended: what a lock without
// fencing lets through when a holder pauses past its lease.
func Overlaps(r *Report, ops []Op) int {
	type span struct {
		client     string
		start, end int64
	}
	var spans []span
	open := map[string]*span{}
	last := map[string]int64{}
	for _, op := range ops {
		last[op.Client] = op.Time
		switch {
		case op.F == FLock && op.Type == OK:
			open[op.Client] = &span{client: op.Client, start: op.Time}
		case op.F == FUnlock && op.Type == Invoke && open[op.Client] != nil:
			s := open[op.Client]
			s.end = op.Time
			spans = append(spans, *s)
			delete(open, op.Client)
		}
	}
	for c, s := range open {
		s.end = last[c]
		spans = append(spans, *s)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	n := 0
	var maxEnd int64
	maxClient := ""
	for _, s := range spans {
		r.Checked[Overlap]++
		if s.start < maxEnd && s.client != maxClient {
			n++
		}
		if s.end > maxEnd {
			maxEnd, maxClient = s.end, s.client
		}
	}
	return n
}

// CheckReturned checks that every invoke of every client was followed by
// its completion, and records the clients that reported themselves stuck
// or leaking goroutines. procs are the process numbers that must have
// finished with an FExit record.
func CheckReturned(r *Report, ops []Op, procs []int) {
	pending := map[string]Op{}
	exited := map[int]bool{}
	for _, op := range ops {
		switch op.Type {
		case Invoke:
			r.Checked[Returned]++
			if p, ok := pending[op.Client]; ok {
				r.Violate(Returned, "%s: %s invoked at %s before %s invoked at %s returned", op.Client, op.F, at(op.Time), p.F, at(p.Time))
			}
			pending[op.Client] = op
			continue
		case OK, Fail, Info:
			delete(pending, op.Client)
		}
		switch op.F {
		case FStuck:
			r.Violate(Returned, "%s: stuck: %s", op.Client, op.Err)
		case FLeak:
			r.Violate(NoLeaks, "process %d: %s", op.Proc, op.Err)
		case FExit:
			exited[op.Proc] = true
		}
	}
	for _, p := range pending {
		r.Violate(Returned, "%s: %s invoked at %s never returned", p.Client, p.F, at(p.Time))
	}
	for _, p := range procs {
		r.Checked[NoLeaks]++
		if !exited[p] {
			r.Violate(Returned, "process %d did not finish its run", p)
		}
	}
}

func at(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000") }
