package historycheck

// The second checker: sequential models of the primitives, checked for
// linearizability by porcupine (github.com/anishathalye/porcupine, the
// checker of etcd's own robustness tests), on the same histories as the
// checks of check.go and shared.go but by a different method. Those
// rebuild each queue by etcd revision and apply the library's rule to
// it; these ask only whether some order of the clients' calls, each taken
// at one instant between its invoke and its completion, and of the key
// deletions that etcd recorded, obeys the model.
//
// A deletion is not a client call: a lease that expires, or a key deleted
// from outside, ends a hold at a revision that no client asked for. Its
// instant is bounded in wall-clock time by the calls that saw a revision
// before or after it (RevClock), so that a holder's pause past its lease
// is a legal history, and a grant while the older key still existed is
// not.

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Invariants of the models.
const (
	Linearizable = "porcupine: each name's history linearizable by its model"
	Agree        = "porcupine and the revision checks agree on each name"
)

// never is the completion time of a call whose outcome is unknown: it may
// take effect at any time after its invoke.
const never = math.MaxInt64

// Call is a completion of a history with the time its call began (the
// client's invoke, or its previous record when it wrote none) and the
// time it returned; End is never when its outcome is unknown (Info).
type Call struct {
	Op
	Start, End int64
}

// Calls pairs each completion of ops with the invoke before it from the
// same client. ops may be the histories of several processes one after
// the other: each client's records are in order.
func Calls(ops []Op) []Call {
	invoked := map[string]int64{}
	last := map[string]int64{}
	var calls []Call
	for _, op := range ops {
		prev, seen := last[op.Client]
		last[op.Client] = op.Time
		if op.Type == Invoke {
			invoked[op.Client] = op.Time
			continue
		}
		start, ok := invoked[op.Client]
		delete(invoked, op.Client)
		if !ok {
			if !seen {
				prev = 0
			}
			start = prev
		}
		end := op.Time
		if op.Type == Info {
			end = never
		}
		calls = append(calls, Call{Op: op, Start: start, End: end})
	}
	return calls
}

// RevClock bounds when each etcd revision was committed, in wall-clock
// time: after the start of every call that saw an older revision (a read
// at revision r, or a commit at r, happened while r was the newest, so
// any later revision came after that call began), and before the end of
// every call that saw it or a newer one, and before the watch of the test
// delivered it.
type RevClock struct {
	revs  []int64 // revisions seen by calls, ascending
	maxLo []int64 // maxLo[i]: the latest start of the calls that saw revs[0..i]
	minHi []int64 // minHi[i]: the earliest end of the calls that saw revs[i..]
	at    map[int64]time.Time
}

// NewRevClock is the clock of the calls of every workload (their Rev) and
// of the watch's delivery times.
func NewRevClock(calls []Call, delivered map[int64]time.Time) *RevClock {
	var seen []Call
	for _, c := range calls {
		if c.Type == OK && c.Rev > 0 {
			seen = append(seen, c)
		}
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i].Rev < seen[j].Rev })
	k := &RevClock{at: delivered}
	for i, c := range seen {
		k.revs = append(k.revs, c.Rev)
		lo := c.Start
		if i > 0 {
			lo = max(lo, k.maxLo[i-1])
		}
		k.maxLo = append(k.maxLo, lo)
	}
	k.minHi = make([]int64, len(seen))
	for i := len(seen) - 1; i >= 0; i-- {
		k.minHi[i] = seen[i].End
		if i+1 < len(seen) {
			k.minHi[i] = min(k.minHi[i], k.minHi[i+1])
		}
	}
	return k
}

// Bounds returns the interval of wall-clock time in which revision rev
// was committed; hi is never when nothing bounds it.
func (k *RevClock) Bounds(rev int64) (lo, hi int64) {
	i := sort.Search(len(k.revs), func(i int) bool { return k.revs[i] >= rev })
	hi = never
	if i > 0 {
		lo = k.maxLo[i-1]
	}
	if i < len(k.revs) {
		hi = k.minHi[i]
	}
	if t, ok := k.at[rev]; ok {
		hi = min(hi, t.UnixNano())
	}
	return lo, hi
}

// Kinds of the models' inputs.
const (
	acquireIn = iota // a client's grant of a hold (Lock, Campaign, AcquireN ok)
	releaseIn        // a client's release (Unlock, Resign, Release)
	writeIn          // a client's guarded write, which committed
	endIn            // etcd deleted the hold's key: released, expired, or deleted from outside
	casIn            // a counter's increment: from the value read to the value written
	readIn           // a read of a counter
)

// in is an input of a model: kind, the hold's token (its key's create
// revision), and for a semaphore the weight and the limit in force.
type in struct {
	kind          int
	token         int64
	weight, limit int
	from, to      int64 // casIn: the value read and the value written; readIn: to
	rev           int64 // endIn: the revision of the deletion
}

func (x in) String() string {
	switch x.kind {
	case acquireIn:
		if x.limit > 0 {
			return fmt.Sprintf("acquire(%d, weight %d, limit %d)", x.token, x.weight, x.limit)
		}
		return fmt.Sprintf("acquire(%d)", x.token)
	case releaseIn:
		return fmt.Sprintf("release(%d)", x.token)
	case writeIn:
		return fmt.Sprintf("guarded write(%d)", x.token)
	case endIn:
		return fmt.Sprintf("etcd: key %d deleted at revision %d", x.token, x.rev)
	case casIn:
		return fmt.Sprintf("increment %d -> %d", x.from, x.to)
	default:
		return fmt.Sprintf("read -> %d", x.to)
	}
}

// lockState is the state of a fenced lock: the token holding it (0 when
// free) and the highest token granted so far.
type lockState struct{ holder, last int64 }

// FencedLock is the model of a Mutex, or of an Election's leadership: one
// holder at a time, each grant with a token higher than any before (the
// fence), a hold that ends when etcd deletes its key, guarded writes only
// by the holder, and a release that returns once the hold has ended.
var FencedLock = porcupine.Model{
	Init: func() any { return lockState{} },
	Step: func(state, input, _ any) (bool, any) {
		s, x := state.(lockState), input.(in)
		switch x.kind {
		case acquireIn:
			if s.holder != 0 || x.token <= s.last {
				return false, s
			}
			return true, lockState{holder: x.token, last: x.token}
		case endIn:
			if s.holder == x.token {
				s.holder = 0
			}
			return true, s
		case releaseIn:
			return s.holder != x.token && x.token <= s.last, s
		case writeIn:
			return x.token != 0 && s.holder == x.token, s
		}
		return false, s
	},
	DescribeOperation: func(input, _ any) string { return input.(in).String() },
	DescribeState: func(state any) string {
		s := state.(lockState)
		return fmt.Sprintf("holder %d, last token %d", s.holder, s.last)
	},
}

// maxHolders bounds the holders of a semaphore's state: more than any
// limit the fault workloads use.
const maxHolders = 8

// semState is the state of a weighted semaphore: its holds' tokens and
// weights, in the order granted; an array, so that states compare with ==.
type semState struct {
	n       int
	tokens  [maxHolders]int64
	weights [maxHolders]int
}

func (s semState) held() int {
	sum := 0
	for _, w := range s.weights[:s.n] {
		sum += w
	}
	return sum
}

func (s semState) index(token int64) int {
	for i, t := range s.tokens[:s.n] {
		if t == token {
			return i
		}
	}
	return -1
}

// WeightedSemaphore is the model of a Semaphore: a grant of weight w
// under the limit in force (the one in the key's value when the grant
// read it) only while the weights held add up to at most that limit less
// w; a hold that ends when etcd deletes its key; guarded writes only by a
// holder; and a release that returns once the hold has ended. A limit
// lowered by SetLimit does not end the holds above it: later grants wait
// for enough of them to end.
var WeightedSemaphore = porcupine.Model{
	Init: func() any { return semState{} },
	Step: func(state, input, _ any) (bool, any) {
		s, x := state.(semState), input.(in)
		i := s.index(x.token)
		switch x.kind {
		case acquireIn:
			if i >= 0 || s.n == maxHolders || x.weight < 1 || s.held()+x.weight > x.limit {
				return false, s
			}
			s.tokens[s.n], s.weights[s.n] = x.token, x.weight
			s.n++
			return true, s
		case endIn:
			if i >= 0 {
				copy(s.tokens[i:], s.tokens[i+1:s.n])
				copy(s.weights[i:], s.weights[i+1:s.n])
				s.n--
				s.tokens[s.n], s.weights[s.n] = 0, 0
			}
			return true, s
		case releaseIn:
			return i < 0, s
		case writeIn:
			return i >= 0, s
		}
		return false, s
	},
	DescribeOperation: func(input, _ any) string { return input.(in).String() },
	DescribeState: func(state any) string {
		s := state.(semState)
		return fmt.Sprintf("tokens %v, weights %v", s.tokens[:s.n], s.weights[:s.n])
	},
}

// Register is the model of a guarded counter: an increment read v and
// writes v+1, and applies only if the counter is still v (an increment
// lost or applied twice breaks the chain); a read returns the value.
var Register = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, _ any) (bool, any) {
		v, x := state.(int64), input.(in)
		switch x.kind {
		case casIn:
			if v != x.from {
				return false, v
			}
			return true, x.to
		case readIn:
			return v == x.to, v
		}
		return false, v
	},
	DescribeOperation: func(input, _ any) string { return input.(in).String() },
	DescribeState:     func(state any) string { return fmt.Sprint(state.(int64)) },
}

// endsClient is the ClientId of etcd's deletions in a history (only
// porcupine's visualisation uses it).
const endsClient = 1 << 20

// HoldHistory is the history of one lock or semaphore name for
// FencedLock or WeightedSemaphore: the grants (ops of function acquire
// that succeeded), releases (ok, or of unknown outcome: then they end at
// never), guarded writes that committed, and a deletion for each key
// that etcd deleted, bounded by clock. weigh gives a grant's weight and
// limit for WeightedSemaphore; nil for FencedLock.
func HoldHistory(calls []Call, acquire, release string, t *Timeline, clock *RevClock, weigh func(c Call, t *Timeline) (w, lim int)) []porcupine.Operation {
	ids := map[string]int{}
	id := func(client string) int {
		if _, ok := ids[client]; !ok {
			ids[client] = len(ids)
		}
		return ids[client]
	}
	var h []porcupine.Operation
	add := func(c Call, x in) {
		h = append(h, porcupine.Operation{ClientId: id(c.Client), Input: x, Call: c.Start, Return: c.End})
	}
	for _, c := range calls {
		switch {
		case c.F == acquire && c.Type == OK:
			x := in{kind: acquireIn, token: c.Token}
			if weigh != nil {
				x.weight, x.limit = weigh(c, t)
			}
			add(c, x)
		case c.F == release && c.Type != Fail:
			add(c, in{kind: releaseIn, token: c.Token})
		case c.F == FIncr && c.Type == OK:
			add(c, in{kind: writeIn, token: c.Token})
		}
	}
	for _, l := range t.sorted {
		if l.deleted == 0 {
			continue
		}
		lo, hi := clock.Bounds(l.deleted)
		h = append(h, porcupine.Operation{ClientId: endsClient, Input: in{kind: endIn, token: l.created, rev: l.deleted}, Call: lo, Return: hi})
	}
	return h
}

// GrantWeight is the weight and limit of a semaphore's grant: its weight as
// the client asked (Op.Value, 1 when 0), and the limit in its key's value
// at the revision of the read that granted it (0, which no grant fits,
// when etcd had no such key).
func GrantWeight(c Call, t *Timeline) (w, lim int) {
	w = max(1, int(c.Value))
	if l := t.byCreate[c.Token]; l != nil && l.key == c.Key {
		lim, _ = parseSem(l.valueAt(c.Rev))
	}
	return w, lim
}

// CounterHistory is the history of a guarded counter for Register: the
// increments that committed, by etcd's record of them (st.Ops; an
// increment of unknown outcome that committed ends at never), the guarded
// reads of the counter (FRRead ok), and a read of st.Value after
// everything. An increment that failed is left out: if etcd has it anyway,
// the final read does not fit.
func CounterHistory(calls []Call, st CounterState) []porcupine.Operation {
	var h []porcupine.Operation
	var last int64
	ids := map[string]int{}
	for _, c := range calls {
		last = max(last, c.Start, min(c.End, c.Op.Time))
		if _, ok := ids[c.Client]; !ok {
			ids[c.Client] = len(ids)
		}
		switch {
		case c.F == FIncr && c.Workload != "election" && (c.Type == OK || c.Type == Info):
			if _, ok := st.Ops[c.ID]; c.Type == Info && !ok {
				continue
			}
			h = append(h, porcupine.Operation{ClientId: ids[c.Client], Input: in{kind: casIn, from: c.Value - 1, to: c.Value}, Call: c.Start, Return: c.End})
		case c.F == FRRead && c.Type == OK:
			h = append(h, porcupine.Operation{ClientId: ids[c.Client], Input: in{kind: readIn, to: c.Value}, Call: c.Start, Return: c.End})
		}
	}
	return append(h, porcupine.Operation{ClientId: len(ids), Input: in{kind: readIn, to: st.Value}, Call: last + 1, Return: last + 1})
}

// CheckModel checks the history h of name against model m within
// timeout, and records the verdict: a history that is not linearizable,
// or whose check did not finish in time, is a violation of Linearizable.
// It returns porcupine's result.
func CheckModel(r *Report, name, model string, m porcupine.Model, h []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	r.Checked[Linearizable]++
	res := porcupine.CheckOperationsTimeout(m, h, timeout)
	switch res {
	case porcupine.Illegal:
		r.Violate(Linearizable, "%s: no order of its %d operations obeys the %s model", name, len(h), model)
	case porcupine.Unknown:
		r.Violate(Linearizable, "%s: the %s model's check of %d operations timed out after %v: not checked", name, model, len(h), timeout)
	}
	return res
}
