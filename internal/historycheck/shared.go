package historycheck

import (
	"sort"
	"strings"
)

// Invariants of the locks that more than one client may hold at once.
const (
	SemLimit   = "semaphore: at most limit holders by revision"
	RWExclude  = "rwmutex: a writer excludes everyone by revision"
	ReadStable = "rwmutex: a reader's guarded reads see no write"
)

// FRRead is a guarded read under a hold (RWMutex.Txn with a Get): Value
// read, Rev of the read, Token of the hold.
const FRRead = "rread"

// Rule says whether the key of lifetime l holds at revision rev, given
// the other keys of its queue: what the library's rule for a kind of lock
// decides from the same keys.
type Rule struct {
	inv   string // the invariant its violations count against
	holds func(t *Timeline, l *lifetime, rev int64) bool
	// fits says whether hold h may start while the holds of active are
	// current.
	fits func(h *lifetime, active []*lifetime) bool
}

// SemaphoreRule is the rule of a Semaphore with limit permits: a key
// holds while fewer than limit older keys exist.
func SemaphoreRule(limit int) Rule {
	return Rule{
		inv: SemLimit,
		holds: func(t *Timeline, l *lifetime, rev int64) bool {
			return t.olderAt(l, rev, func(*lifetime) bool { return true }) < limit
		},
		fits: func(_ *lifetime, active []*lifetime) bool { return len(active) < limit },
	}
}

// RWMutexRule is the rule of an RWMutex whose writers' keys have "/w/" in
// them: a writer holds while no older key exists, a reader while no older
// writer's key does.
func RWMutexRule() Rule {
	return Rule{
		inv: RWExclude,
		holds: func(t *Timeline, l *lifetime, rev int64) bool {
			if isWriter(l) {
				return t.olderAt(l, rev, func(*lifetime) bool { return true }) == 0
			}
			return t.olderAt(l, rev, isWriter) == 0
		},
		fits: func(h *lifetime, active []*lifetime) bool {
			if isWriter(h) {
				return len(active) == 0
			}
			for _, a := range active {
				if isWriter(a) {
					return false
				}
			}
			return true
		},
	}
}

func isWriter(l *lifetime) bool { return strings.Contains(l.key, "/w/") }

// olderAt counts the keys older than l that existed at rev and that
// count says count.
func (t *Timeline) olderAt(l *lifetime, rev int64, count func(*lifetime) bool) int {
	n := 0
	for _, o := range t.sorted {
		if o.created >= l.created {
			break
		}
		if o.aliveAt(rev) && count(o) {
			n++
		}
	}
	return n
}

// CheckShared checks the holds of one queue of a lock that several may
// hold at once (a Semaphore, an RWMutex) against its timeline, by rule:
// each acquisition's token is the create revision of its key, and the key
// held by the rule at the revision of the read that granted it (Op.Rev;
// when 0, the first guarded operation of the hold tells); every guarded
// write (FIncr ok) and guarded read (FRRead ok) committed at a revision
// when its key held; and, as intervals of revisions from the grant to the
// key's deletion, the holds never exceed what the rule allows (a
// semaphore's limit; a writer alone). The reads of one hold of a reader
// must all see the same value: nobody wrote while it held.
func CheckShared(r *Report, name string, ops []Op, t *Timeline, rule Rule) {
	type held struct {
		op    Op
		l     *lifetime
		start int64
	}
	holds := map[int64]*held{}
	var order []*held
	read := map[int64]int64{} // token -> value of its first guarded read
	for _, op := range ops {
		if op.Type != OK {
			continue
		}
		switch op.F {
		case FLock:
			r.Checked[rule.inv]++
			l := t.byCreate[op.Token]
			if l == nil || l.key != op.Key {
				r.Violate(rule.inv, "%s: %s acquired %q with token %d, which is not the create revision of that key in etcd", name, op.Client, op.Key, op.Token)
				continue
			}
			if op.Rev != 0 && (!l.aliveAt(op.Rev) || !rule.holds(t, l, op.Rev)) {
				r.Violate(rule.inv, "%s: %s acquired %v at revision %d, when it did not hold", name, op.Client, l, op.Rev)
			}
			h := &held{op: op, l: l, start: op.Rev}
			holds[op.Token] = h
			order = append(order, h)
		case FIncr, FRRead:
			r.Checked[GuardedTxn]++
			l := t.byCreate[op.Token]
			if l == nil || !l.aliveAt(op.Rev) || !rule.holds(t, l, op.Rev) {
				r.Violate(GuardedTxn, "%s: %s committed guarded %s %s at revision %d outside its hold (token %d: %v)", name, op.Client, op.F, op.ID, op.Rev, op.Token, l)
			}
			if h := holds[op.Token]; h != nil && (h.start == 0 || op.Rev < h.start) {
				h.start = op.Rev
			}
			if op.F == FRRead {
				r.Checked[ReadStable]++
				if v, ok := read[op.Token]; ok && v != op.Value {
					r.Violate(ReadStable, "%s: %s read %d at revision %d under the hold of token %d, which had read %d", name, op.Client, op.Value, op.Rev, op.Token, v)
				} else if !ok {
					read[op.Token] = op.Value
				}
			}
		}
	}
	// Sweep the holds by the revision they began at, keeping those still
	// current: each must fit beside them.
	var spans []*held
	for _, h := range order {
		if h.start != 0 {
			spans = append(spans, h)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var active []*lifetime
	var activeBy []string
	for _, h := range spans {
		n := 0
		for i, a := range active {
			if a.deleted == 0 || a.deleted > h.start {
				active[n], activeBy[n] = a, activeBy[i]
				n++
			}
		}
		active, activeBy = active[:n], activeBy[:n]
		r.Checked[rule.inv]++
		if !rule.fits(h.l, active) {
			r.Violate(rule.inv, "%s: %s held %v from revision %d while %v (%s) held", name, h.op.Client, h.l, h.start, active, strings.Join(activeBy, ", "))
		}
		active = append(active, h.l)
		activeBy = append(activeBy, h.op.Client)
	}
}
