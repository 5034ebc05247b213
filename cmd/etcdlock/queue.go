package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// lockPrefix is the prefix of a lock's keys, as the concurrency package
// builds it: the name followed by "/", even if the name ends in "/".
func lockPrefix(name string) string { return name + "/" }

// entry is one key in a lock's queue: the holder or a waiter, as the
// library's Inspect reads it, with what etcdlock wrote into it.
type entry struct {
	Key         string
	Lease       clientv3.LeaseID
	TTL         int64 // seconds left on the lease; -1 if it is gone
	Rev         int64 // create revision: the order in the queue, and the holder's fencing token
	Value       string
	Meta        *meta               // nil unless the key (or, MetaInOwner, its owner record) was written by etcdlock lock or elect
	MetaInOwner bool                // Meta is from the owner record (annotateOwner), and Value is the key's own
	Owner       *concurrency.Owner  // its session's owner record (concurrency.WithOwner); nil if none
	Kind        string              // what kind of lock the key belongs to (concurrency.KeyKind's names)
	Limit       int                 // a semaphore's limit, from its value; 0 for other kinds
	Weight      int                 // a semaphore key's weight, from its value; 0 for other kinds
	Holds       bool                // the key holds, by the rule of its kind (concurrency.QueueKey.Holds)
	Yield       bool                // a yield request asks this key's hold (concurrency.QueueKey.YieldRequested)
	Health      *concurrency.Health // its session's failing health checks (concurrency.QueueKey.Health); nil if none
}

// Kinds of lock key, as concurrency.KeyKind names them.
var (
	kindMutex     = concurrency.KindMutex.String()     // <lease>: Mutex, Election, etcdctl lock and elect
	kindSemaphore = concurrency.KindSemaphore.String() // <lease>-<seq>, with the limit as its value
	kindReader    = concurrency.KindReader.String()    // r/<lease>-<seq>: RWMutex read side
	kindWriter    = concurrency.KindWriter.String()    // w/<lease>-<seq>: RWMutex write side
	kindOther     = concurrency.KindOther.String()     // none of these: counted as a writer
)

// queueKind is the kind of the keys of q: "" when q is empty, "mixed" when
// they are of several kinds, "rwmutex" for readers and writers.
func queueKind(q []entry) string {
	kind := ""
	for _, e := range q {
		k := e.Kind
		if k == kindReader || k == kindWriter {
			k = "rwmutex"
		}
		switch {
		case kind == "":
			kind = k
		case kind != k:
			return "mixed"
		}
	}
	return kind
}

// meta is what `etcdlock lock` writes into the value of its own lock key,
// so that inspect and waiting messages can say who holds or waits and
// since when: etcd keeps no time with a key. The times are on the clock of
// the host that wrote them. Keys written by etcd's package, etcdctl or this
// module's library have an empty value, and inspect shows "-" for them.
// The lock itself never reads the value: every client ignores it.
type meta struct {
	Host         string    `json:"host,omitempty"`
	PID          int       `json:"pid,omitempty"`
	WaitingSince time.Time `json:"waiting_since"`
	HeldSince    time.Time `json:"held_since,omitzero"`
}

// owner is the owner record of the sessions of etcdlock's lock and elect
// (concurrency.WithOwner): this host and process, and a label saying which
// subcommand runs which command, so that inspect shows them for every kind
// of lock, semaphores and elections included.
func owner(subcommand string, command []string) concurrency.Owner {
	label := "etcdlock " + subcommand
	if len(command) > 0 {
		label += ": " + filepath.Base(command[0])
	}
	return concurrency.ProcessOwner(label)
}

// newMeta describes this process, waiting since since.
func newMeta(since time.Time) meta {
	o := concurrency.ProcessOwner("")
	return meta{Host: o.Host, PID: o.PID, WaitingSince: since.UTC()}
}

func parseMeta(v []byte) *meta {
	var m meta
	if len(v) == 0 || v[0] != '{' || json.Unmarshal(v, &m) != nil || m.WaitingSince.IsZero() {
		return nil
	}
	return &m
}

// readQueue returns the keys of lock name in queue order (the holder first)
// and the revision they were read at, each with its kind, whether it
// holds, and its lease's TTL left (concurrency.Inspect), and what etcdlock
// wrote into the key or its owner record.
func readQueue(ctx context.Context, cli *clientv3.Client, name string) ([]entry, *concurrency.Queue, error) {
	iq, err := concurrency.Inspect(ctx, cli, name)
	if err != nil {
		return nil, nil, err
	}
	q := make([]entry, 0, len(iq.Keys))
	for _, k := range iq.Keys {
		q = append(q, entry{
			Key:    k.Key,
			Lease:  k.Lease,
			TTL:    k.TTL,
			Rev:    k.CreateRevision,
			Value:  k.Value,
			Meta:   parseMeta([]byte(k.Value)),
			Owner:  k.Owner,
			Kind:   k.Kind.String(),
			Limit:  k.Limit,
			Weight: k.Weight,
			Holds:  k.Holds,
			Yield:  k.YieldRequested,
			Health: k.Health,
		})
	}
	readOwnerTimes(ctx, cli, q)
	return q, iq, nil
}

// ownerTimes is an owner record (concurrency.WithOwner) with the times of
// a meta: what etcdlock writes over its session's record for the keys whose
// value it cannot use (a semaphore key's is its limit, an election key's
// its proposal), so that inspect shows how long they waited and held. It
// is still an Owner to the library, whose parser ignores the times.
type ownerTimes struct {
	Host         string    `json:"host,omitempty"`
	PID          int       `json:"pid,omitempty"`
	Label        string    `json:"label,omitempty"`
	WaitingSince time.Time `json:"waiting_since"`
	HeldSince    time.Time `json:"held_since,omitzero"`
}

// ownerKey is the key of the owner record of lease.
func ownerKey(lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s%x", concurrency.OwnerPrefix, int64(lease))
}

// keyLease is the lease of a Mutex or Election key, NAME/<lease in hex>.
func keyLease(key string) (clientv3.LeaseID, bool) {
	id, err := strconv.ParseInt(key[strings.LastIndexByte(key, '/')+1:], 16, 64)
	return clientv3.LeaseID(id), err == nil
}

// annotateOwner writes o with the times of m over the owner record of
// lease, if the record is there, on that lease (the session wrote it): a
// session without one (the user may not write there) gets none.
func annotateOwner(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, o concurrency.Owner, m meta) error {
	v, err := json.Marshal(ownerTimes{Host: o.Host, PID: o.PID, Label: o.Label, WaitingSince: m.WaitingSince, HeldSince: m.HeldSince})
	if err != nil {
		return err
	}
	key := ownerKey(lease)
	_, err = cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", lease)).
		Then(clientv3.OpPut(key, string(v), clientv3.WithIgnoreLease())).
		Commit()
	return err
}

// readOwnerTimes sets, for the entries of q without a meta in their key
// but with an owner record, the times that annotateOwner wrote there, if
// any. It reads the records in transactions of at most 100 gets; the times
// only inform, so it gives up quietly on an error.
func readOwnerTimes(ctx context.Context, cli *clientv3.Client, q []entry) {
	byKey := map[string][]int{}
	var ops []clientv3.Op
	for i, e := range q {
		if e.Meta != nil || e.Owner == nil {
			continue
		}
		k := ownerKey(e.Lease)
		if byKey[k] == nil {
			ops = append(ops, clientv3.OpGet(k))
		}
		byKey[k] = append(byKey[k], i)
	}
	for len(ops) > 0 {
		n := min(len(ops), 100)
		resp, err := cli.Txn(ctx).Then(ops[:n]...).Commit()
		if err != nil {
			return
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().GetKvs() {
				if m := parseMeta(kv.Value); m != nil {
					for _, i := range byKey[string(kv.Key)] {
						q[i].Meta, q[i].MetaInOwner = m, true
					}
				}
			}
		}
		ops = ops[n:]
	}
}

// annotate writes m into key if key still has create revision rev, keeping
// its lease. A key that is gone or newer is left alone.
func annotate(ctx context.Context, cli *clientv3.Client, key string, rev int64, m meta) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(v), clientv3.WithIgnoreLease())).
		Commit()
	return err
}

// describe says who e is, for messages: its key, lease, and what its
// metadata and owner record tell, as of now.
func (e entry) describe(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (lease %x", e.Key, int64(e.Lease))
	w := e.who()
	if w.PID != 0 {
		fmt.Fprintf(&b, ", pid %d", w.PID)
	}
	if w.Host != "" {
		fmt.Fprintf(&b, " on %s", w.Host)
	}
	if m := e.Meta; m != nil && !m.HeldSince.IsZero() {
		fmt.Fprintf(&b, ", held %s", roundAge(now.Sub(m.HeldSince)))
	}
	b.WriteString(")")
	return b.String()
}

// who is what is known of e's owner: the host and pid from the record
// etcdlock lock wrote into the key when it has them, else from its
// session's owner record, with the label of the latter.
func (e entry) who() concurrency.Owner {
	var w concurrency.Owner
	if e.Owner != nil {
		w = *e.Owner
	}
	if m := e.Meta; m != nil && m.PID != 0 {
		w.Host, w.PID = m.Host, m.PID
	}
	return w
}

// waited is how long e waited for the lock: until it acquired it, or until
// now if it is still waiting. ok is false without metadata.
func (e entry) waited(now time.Time) (d time.Duration, ok bool) {
	if e.Meta == nil {
		return 0, false
	}
	end := now
	if !e.Meta.HeldSince.IsZero() {
		end = e.Meta.HeldSince
	}
	return max(end.Sub(e.Meta.WaitingSince), 0), true
}

// held is how long e has held the lock. ok is false without metadata or if
// e's metadata does not say it acquired the lock.
func (e entry) held(now time.Time) (d time.Duration, ok bool) {
	if e.Meta == nil || e.Meta.HeldSince.IsZero() {
		return 0, false
	}
	return max(now.Sub(e.Meta.HeldSince), 0), true
}

// roundAge rounds a duration for people: milliseconds under a second,
// tenths under a minute, seconds above.
func roundAge(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// holders returns the entries of q that hold, and waiters those that wait,
// both in queue order.
func holders(q []entry) (held, waiting []entry) {
	for _, e := range q {
		if e.Holds {
			held = append(held, e)
		} else {
			waiting = append(waiting, e)
		}
	}
	return held, waiting
}

// heldBy describes the holders of a queue for messages: the oldest, and
// how many more hold with it.
func heldBy(held []entry, now time.Time) string {
	switch len(held) {
	case 0:
		return "nobody"
	case 1:
		return held[0].describe(now)
	}
	return fmt.Sprintf("%s and %d more", held[0].describe(now), len(held)-1)
}

// find returns the position of key in q, or -1.
func find(q []entry, key string) int {
	for i, e := range q {
		if e.Key == key {
			return i
		}
	}
	return -1
}
