package historycheck

import (
	"sort"
	"strconv"
	"strings"
)

// Invariants of the locks that more than one client may hold at once.
const (
	SemLimit   = "semaphore: at most limit holders by revision"
	SemWeight  = "weighted semaphore: held weights within the limit by revision"
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
	// grant, if not nil, says whether a read at rev may grant l (by
	// default, holds).
	grant func(t *Timeline, l *lifetime, rev int64) bool
	// fits says whether hold h may start at revision rev while the holds
	// of active are current.
	fits func(t *Timeline, h *lifetime, active []*lifetime, rev int64) bool
}

// SemaphoreRule is the rule of a Semaphore with limit permits: a key
// holds while fewer than limit older keys exist.
func SemaphoreRule(limit int) Rule {
	return Rule{
		inv: SemLimit,
		holds: func(t *Timeline, l *lifetime, rev int64) bool {
			return t.olderAt(l, rev, func(*lifetime) bool { return true }) < limit
		},
		fits: func(_ *Timeline, _ *lifetime, active []*lifetime, _ int64) bool { return len(active) < limit },
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
		fits: func(_ *Timeline, h *lifetime, active []*lifetime, _ int64) bool {
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

// WeightedSemaphoreRule is the rule of a Semaphore whose keys carry their
// limit and weight in their values ("L", or "L/W" for a weight W other than
// 1) and whose limit changes (SetLimit rewrites every value at once): a
// read at rev grants a key when the weights of the older keys alive then
// and its own add up to at most the limit in its value at rev. A key holds
// from the first revision at which that is so (firstHold) until it is
// deleted, even if a smaller limit comes later. Holds fit together when
// their weights add up to at most the limit under which the newest of
// them first held: that read saw all the others, older and alive.
func WeightedSemaphoreRule() Rule {
	return Rule{
		inv: SemWeight,
		holds: func(t *Timeline, l *lifetime, rev int64) bool {
			f := t.firstHold(l)
			return f > 0 && f <= rev && l.aliveAt(rev)
		},
		grant: func(t *Timeline, l *lifetime, rev int64) bool { return t.fitsAt(l, rev) },
		fits: func(t *Timeline, h *lifetime, active []*lifetime, rev int64) bool {
			newest, sum := h, semWeight(h)
			for _, a := range active {
				sum += semWeight(a)
				if a.created > newest.created {
					newest = a
				}
			}
			f := t.firstHold(newest)
			if f <= 0 {
				return false
			}
			lim, _ := parseSem(newest.valueAt(f))
			return sum <= lim
		},
	}
}

// parseSem is the limit and weight in a weighted semaphore key's value;
// 0, 0 if it has none.
func parseSem(v string) (lim, w int) {
	ls, ws, weighted := strings.Cut(v, "/")
	lim, err := strconv.Atoi(ls)
	if err != nil || lim <= 0 {
		return 0, 0
	}
	w = 1
	if weighted {
		if w, err = strconv.Atoi(ws); err != nil || w <= 0 {
			return 0, 0
		}
	}
	return lim, w
}

// semWeight is l's weight, from the value it was created with.
func semWeight(l *lifetime) int {
	_, w := parseSem(l.valueAt(l.created))
	return w
}

// fitsAt says whether, at revision rev, the weights of the keys older than
// l alive then and l's own add up to at most the limit in l's value.
func (t *Timeline) fitsAt(l *lifetime, rev int64) bool {
	if !l.aliveAt(rev) {
		return false
	}
	lim, w := parseSem(l.valueAt(rev))
	if lim == 0 {
		return false
	}
	sum := w
	for _, o := range t.sorted {
		if o.created >= l.created {
			break
		}
		if o.aliveAt(rev) {
			sum += semWeight(o)
		}
	}
	return sum <= lim
}

// firstHold is the first revision at which l held by the weighted rule
// (see fitsAt), or -1 if it never did: its creation, or a later revision
// at which an older key went or the values changed.
func (t *Timeline) firstHold(l *lifetime) int64 {
	if l.first != 0 {
		return l.first
	}
	l.first = -1
	if t.fitsAt(l, l.created) {
		l.first = l.created
		return l.first
	}
	i := sort.Search(len(t.changes), func(i int) bool { return t.changes[i] > l.created })
	for ; i < len(t.changes); i++ {
		rev := t.changes[i]
		if l.deleted != 0 && rev >= l.deleted {
			break
		}
		if t.fitsAt(l, rev) {
			l.first = rev
			break
		}
	}
	return l.first
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
			grant := rule.holds
			if rule.grant != nil {
				grant = rule.grant
			}
			if op.Rev != 0 && (!l.aliveAt(op.Rev) || !grant(t, l, op.Rev)) {
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
		if !rule.fits(t, h.l, active, h.start) {
			r.Violate(rule.inv, "%s: %s held %v from revision %d while %v (%s) held", name, h.op.Client, h.l, h.start, active, strings.Join(activeBy, ", "))
		}
		active = append(active, h.l)
		activeBy = append(activeBy, h.op.Client)
	}
}
