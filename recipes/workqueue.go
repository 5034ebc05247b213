package recipes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the WorkQueue, its options, its key layout and Put. Take
// and the waiting line of consumers are in workqueue_take.go, a Delivery's
// Ack and Nack in delivery.go, and the operators' calls (dead letters,
// Stats) in workqueue_admin.go.
//
// A WorkQueue lives in recipes, beside etcd's Queue, because that is where
// a user of etcd's package looks for a queue; its name says what it adds
// (acknowledged work, as SQS's and Redisson's RReliableQueue's users call
// it). It shares no keys with Queue or PriorityQueue.
//
// Keys under the name, each a plain key unless said otherwise:
//
//	name/item/PPPPP/ID    an item, ready or in flight: its record (see record)
//	name/claim/PPPPP/ID   the claim of a delivery, on the consumer's lease
//	name/delay/DUE/PPPPP/ID  a delayed item's record, DUE in Unix nanoseconds
//	name/dead/PPPPP/ID    a dead letter's record
//	name/dedup/DEDUPID    the ID of the item put with a deduplication id
//	name/wait/LEASE/RAND  a consumer waiting in Take, on its lease
//
// PPPPP is the priority in five digits, so key order is priority order,
// and ID is the put time in hex nanoseconds and 8 random hex digits, so
// within a priority key order is the producers' clock order.

// WorkQueue is a queue of work items with acknowledged delivery: an item
// taken (Take) is held by a claim on the consumer's session until the
// consumer acknowledges it (Ack, AckTxn), gives it back (Nack), or its
// session ends, when the item is delivered again. See doc.go and
// docs/semantics.md for what it promises.
//
// A WorkQueue is safe for concurrent use; many processes may use one name.
type WorkQueue struct {
	client *clientv3.Client
	name   string
	pfx    string // name + "/"
	opts   wqOptions
	named  atomic.Bool  // the name was found free of other primitives' keys
	claims atomic.Int64 // claims seen by the last read of ready items
}

// WorkQueueOption configures a WorkQueue (NewWorkQueue).
type WorkQueueOption func(*wqOptions)

type wqOptions struct {
	maxDeliveries int           // 0: no limit
	procLimit     time.Duration // 0: none
	maxRequest    int
	badOption     error // the first invalid option, returned by NewWorkQueue
}

// DefaultMaxRequestBytes is etcd's default limit on a request's size
// (--max-request-bytes), which bounds an item's size.
const DefaultMaxRequestBytes = 1536 * 1024

// Most that an option may ask for: deliveries of an item, a processing
// limit, and a delay (a year: a due time past 2262 would not fit etcd's
// keys' nanoseconds).
const (
	MaxDeliveriesLimit  = 1 << 20
	MaxProcessingLimit  = 24 * time.Hour
	MaxDelay            = 366 * 24 * time.Hour // of WithDelay and Nack
	maxDedupIDBytes     = 1024
	recordOverheadBytes = 512 // keys, header and the transaction around a record
	promoteBatch        = 16  // delayed records read per Take
)

// WithMaxDeliveries moves an item to the dead letters instead of
// delivering it an (n+1)th time: a Take that finds an item already
// delivered n times, or a Nack of its nth delivery, moves it, in one
// transaction. The default is no limit; n <= 0 or over
// MaxDeliveriesLimit makes NewWorkQueue fail with ErrInvalidLimit. The
// limit is not stored in etcd: each process applies its own, so every
// process of one queue should give the same.
func WithMaxDeliveries(n int) WorkQueueOption {
	return func(o *wqOptions) {
		if n <= 0 || n > MaxDeliveriesLimit {
			o.setBad(fmt.Errorf("%w: max deliveries %d", ErrInvalidLimit, n))
		}
		o.maxDeliveries = n
	}
}

// WithProcessingLimit bounds how long one delivery may be held, for
// consumers that live but hang: the claim is put on a lease of its own,
// granted with a TTL of d rounded up to whole seconds and never renewed,
// so etcd ends the claim after d by its own clock (the leader's; a new
// leader restarts the TTL, so a claim may last up to d longer across a
// leader change), and the item is delivered again. The delivery's Ctx
// ends after d too, by the consumer's clock. It costs one lease grant per
// Take and one revoke per Ack. The default is no limit (the claim lives
// as long as the session); d <= 0 or over MaxProcessingLimit makes
// NewWorkQueue fail with ErrInvalidLimit. Note that with a limit, a
// crashed consumer's claims end after d, not with its session's lease.
func WithProcessingLimit(d time.Duration) WorkQueueOption {
	return func(o *wqOptions) {
		if d <= 0 || d > MaxProcessingLimit {
			o.setBad(fmt.Errorf("%w: processing limit %v", ErrInvalidLimit, d))
		}
		o.procLimit = d
	}
}

// WithMaxRequestBytes tells the queue etcd's --max-request-bytes, if the
// servers run with another one than DefaultMaxRequestBytes (the default):
// Put refuses an item that would not fit with ErrItemTooLarge, before
// writing anything. n of 512 bytes or less makes NewWorkQueue fail with
// ErrInvalidLimit.
func WithMaxRequestBytes(n int) WorkQueueOption {
	return func(o *wqOptions) {
		if n <= recordOverheadBytes {
			o.setBad(fmt.Errorf("%w: max request bytes %d", ErrInvalidLimit, n))
		}
		o.maxRequest = n
	}
}

func (o *wqOptions) setBad(err error) {
	if o.badOption == nil {
		o.badOption = err
	}
}

// NewWorkQueue returns the WorkQueue of name. It does not talk to etcd:
// the first call that does checks that no other primitive's keys are
// under the name (ErrNameInUse). It returns ErrNilClient for a nil
// client, ErrInvalidName for an empty name, and an option's error.
func NewWorkQueue(client *clientv3.Client, name string, opts ...WorkQueueOption) (*WorkQueue, error) {
	if client == nil {
		return nil, ErrNilClient
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty name", ErrInvalidName)
	}
	o := wqOptions{maxRequest: DefaultMaxRequestBytes}
	for _, opt := range opts {
		opt(&o)
	}
	if o.badOption != nil {
		return nil, o.badOption
	}
	return &WorkQueue{client: client, name: name, pfx: name + "/", opts: o}, nil
}

// Name returns the queue's name.
func (q *WorkQueue) Name() string { return q.name }

// PutOption configures one Put.
type PutOption func(*putOptions)

type putOptions struct {
	priority uint16
	delay    time.Duration
	dedup    string
}

// WithPriority puts an item with priority p: lower numbers are taken
// first, as in PriorityQueue; the default is 0.
func WithPriority(p uint16) PutOption { return func(o *putOptions) { o.priority = p } }

// WithDelay makes an item ready d after Put, by the producer's clock
// against the consumers' (see doc.go: etcd has no clock). The default is
// 0 (ready at once); d < 0 or d > MaxDelay makes Put fail with
// ErrInvalidDelay.
func WithDelay(d time.Duration) PutOption { return func(o *putOptions) { o.delay = d } }

// WithDedupID puts the item only if no item put with the same id is still
// in the queue (ready, delayed, in flight or a dead letter): otherwise
// Put returns ErrDuplicate and writes nothing. The id is freed when its
// item is acknowledged or purged. At most 1 KiB; the default is none.
func WithDedupID(id string) PutOption { return func(o *putOptions) { o.dedup = id } }

// Put adds val to the queue and returns the item's id. It checks its input
// before writing anything: ErrInvalidDelay for a negative delay or one
// over MaxDelay,
// ErrItemTooLarge for an item over etcd's request size, ErrInvalidName for
// a dedup id over 1 KiB. With WithDedupID it returns ErrDuplicate, and the
// id of the item already in the queue, if that id is taken.
//
// Put does not block on anything but etcd. If ctx ends while the write is
// in flight, Put waits for etcd's answer (up to 3 s more) and returns nil
// if the item was added, as Queue.EnqueueContext does.
func (q *WorkQueue) Put(ctx context.Context, val string, opts ...PutOption) (string, error) {
	var o putOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := validDelay(o.delay); err != nil {
		return "", err
	}
	if len(o.dedup) > maxDedupIDBytes {
		return "", fmt.Errorf("%w: dedup id of %d bytes", ErrInvalidName, len(o.dedup))
	}
	now := time.Now()
	rec := record{putNanos: now.UnixNano(), dedup: o.dedup, value: val}
	// The largest transaction the record travels in: its own put, with
	// the dedup key put, compared and read (Put), or a move with the
	// queue's keys named four times (Nack, a burial, a promotion).
	if n := len(rec.encode()) + 3*len(o.dedup) + 4*len(q.pfx) + recordOverheadBytes; n > q.opts.maxRequest {
		return "", fmt.Errorf("%w: %d bytes with its record, etcd takes %d", ErrItemTooLarge, n, q.opts.maxRequest)
	}
	if err := q.checkName(ctx); err != nil {
		return "", err
	}
	id := fmt.Sprintf("%05d/%016x%08x", o.priority, now.UnixNano(), rand.Uint32())
	key := q.itemKey(id)
	if o.delay > 0 {
		key = q.delayKey(now.Add(o.delay), id)
	}
	wctx, stop := settling(ctx)
	defer stop()
	var cmps []clientv3.Cmp
	var elses []clientv3.Op
	ops := []clientv3.Op{clientv3.OpPut(key, rec.encode())}
	if o.dedup != "" {
		dk := q.pfx + "dedup/" + o.dedup
		ops = append(ops, clientv3.OpPut(dk, id))
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(dk), "=", 0))
		elses = append(elses, clientv3.OpGet(dk))
	}
	resp, err := q.client.Txn(wctx).If(cmps...).Then(ops...).Else(elses...).Commit()
	if err != nil {
		return "", writeErr(ctx, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) > 0 {
			id = string(kvs[0].Value)
		}
		return id, fmt.Errorf("%w: dedup id %q is item %s", ErrDuplicate, o.dedup, id)
	}
	return id, nil
}

func (q *WorkQueue) itemKey(id string) string  { return q.pfx + "item/" + id }
func (q *WorkQueue) claimKey(id string) string { return q.pfx + "claim/" + id }
func (q *WorkQueue) deadKey(id string) string  { return q.pfx + "dead/" + id }
func (q *WorkQueue) delayKey(due time.Time, id string) string {
	return fmt.Sprintf("%sdelay/%020d/%s", q.pfx, max(due.UnixNano(), 0), id)
}

// The kinds of this queue's keys, in key order.
var wqKinds = []string{"claim/", "dead/", "dedup/", "delay/", "item/", "wait/"}

// checkName reports ErrNameInUse if a key under the name is none of the
// queue's kinds (another primitive's, or a queue named name + "/..." that
// is not one of them): one read of the gaps between the kinds, once per
// WorkQueue. Keys inside the kinds that do not parse are refused where
// they are read.
func (q *WorkQueue) checkName(ctx context.Context) error {
	if q.named.Load() {
		return nil
	}
	var ops []clientv3.Op
	from := q.pfx
	for _, k := range append(wqKinds, "") {
		to := clientv3.GetPrefixRangeEnd(q.pfx)
		if k != "" {
			to = q.pfx + k
		}
		ops = append(ops, clientv3.OpGet(from, clientv3.WithRange(to), clientv3.WithLimit(1), clientv3.WithKeysOnly()))
		from = q.pfx + strings.TrimSuffix(k, "/") + "0" // just past k's range
	}
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	resp, err := q.client.Txn(rctx).Then(ops...).Commit()
	if err != nil {
		return err
	}
	for _, r := range resp.Responses {
		if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
			return fmt.Errorf("%w: %q is not a work queue's key", ErrNameInUse, kvs[0].Key)
		}
	}
	q.named.Store(true)
	return nil
}

// record is what an item's, a delayed item's and a dead letter's key
// hold: a header line "wq1 BASE PUTNANOS DEDUP" and the value. BASE is the
// deliveries counted before the key was written (the item key's version
// counts those since: each claim bumps it), DEDUP the quoted
// deduplication id.
type record struct {
	base     int
	putNanos int64
	dedup    string
	value    string
}

func (r record) encode() string {
	return fmt.Sprintf("wq1 %d %d %s\n%s", r.base, r.putNanos, strconv.Quote(r.dedup), r.value)
}

// parseRecord parses a record another process wrote, with bounds.
func parseRecord(b []byte) (record, error) {
	s := string(b)
	head, val, ok := strings.Cut(s, "\n")
	f := strings.SplitN(head, " ", 4)
	if !ok || len(f) != 4 || f[0] != "wq1" {
		return record{}, fmt.Errorf("%w: not a work queue record", ErrNameInUse)
	}
	base, err1 := strconv.Atoi(f[1])
	put, err2 := strconv.ParseInt(f[2], 10, 64)
	dedup, err3 := strconv.Unquote(f[3])
	if err1 != nil || err2 != nil || err3 != nil || base < 0 || base > MaxDeliveriesLimit {
		return record{}, fmt.Errorf("%w: a work queue record with a bad header %q", ErrNameInUse, head)
	}
	return record{base: base, putNanos: put, dedup: dedup, value: val}, nil
}

// idOf returns the item id (PPPPP/ID) at the end of a key of kind k
// ("item/", "claim/", "dead/" or "delay/"), and its priority.
func (q *WorkQueue) idOf(key []byte, k string) (string, uint16, error) {
	rest, ok := strings.CutPrefix(string(key), q.pfx+k)
	if ok && k == "delay/" {
		_, rest, ok = strings.Cut(rest, "/")
	}
	p, tail, ok2 := strings.Cut(rest, "/")
	pr, err := strconv.ParseUint(p, 10, 16)
	if !ok || !ok2 || err != nil || len(p) != 5 || len(tail) != 24 || strings.Contains(tail, "/") {
		return "", 0, fmt.Errorf("%w: %q is not a work queue's key", ErrNameInUse, key)
	}
	return rest, uint16(pr), nil
}

// validDelay reports a delay below 0 or over MaxDelay (ErrInvalidDelay).
func validDelay(d time.Duration) error {
	if d < 0 || d > MaxDelay {
		return fmt.Errorf("%w: %v (0 to %v)", ErrInvalidDelay, d, MaxDelay)
	}
	return nil
}
