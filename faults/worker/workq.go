package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// Functions of the workq workload's history (a recipes.WorkQueue on
// lockName("workq"), so that the harness's watch records its keys).
const (
	fWQPut  = "wqput"  // Put; ID is the value, Key the item's id
	fWQTake = "wqtake" // Take; on ok, ID the value, Key the item's id, Token the claim's revision, Value the delivery's count
	fWQAck  = "wqack"  // AckTxn with the item's effect; ID, Key, Token as the take's; on ok, Rev of the commit
	fWQNack = "wqnack" // Nack; ID, Key, Token as the take's
	fWQDrop = "wqdrop" // the consumer's session closed without Ack or Nack (a crash)
)

// wqMaxDeliveries is the workq queue's delivery limit.
const wqMaxDeliveries = 3

// wqEffectKey is the key that AckTxn writes for value v: the consumer's
// effect, which must be applied exactly once per item.
func wqEffectKey(v string) string { return *pfx + "/wqeffect/" + v }

// workQueue runs one round of the workq workload: put a value unique to
// the run (a random priority; a quarter with a delay up to 300 ms, a
// quarter with a dedup id), take one item on session s, and end its claim
// at random: mostly AckTxn with the item's effect, sometimes Nack (with a
// delay up to 200 ms), sometimes a crash (the session closed without
// either). Values whose sequence number ends in 7 are poison: always
// nacked, so they reach the dead letters.
func (c *client) workQueue(s *concurrency.Session) error {
	q, err := recipes.NewWorkQueue(c.cli, lockName(c.wl), recipes.WithMaxDeliveries(wqMaxDeliveries))
	if err != nil {
		return err
	}
	c.seq++
	val := fmt.Sprintf("%s.%d", c.name, c.seq)
	opts := []recipes.PutOption{recipes.WithPriority(uint16(rand.IntN(4)))}
	switch rand.IntN(4) {
	case 0:
		opts = append(opts, recipes.WithDelay(rand.N(300*time.Millisecond)))
	case 1:
		opts = append(opts, recipes.WithDedupID(val))
	}
	ctx, cancel := context.WithTimeout(c.run, opTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: fWQPut, ID: val})
	id, err := q.Put(ctx, val, opts...)
	cancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Info, F: fWQPut, ID: val, Err: errText(err)})
	} else {
		c.rec(hc.Op{Type: hc.OK, F: fWQPut, ID: val, Key: id})
	}
	ctx, cancel = context.WithTimeout(c.run, opTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: fWQTake})
	d, err := q.Take(ctx, s)
	cancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Fail, F: fWQTake, Err: errText(err)})
		return err
	}
	op := hc.Op{F: fWQTake, ID: d.Value(), Key: d.ID(), Token: d.Token(), Value: int64(d.Count()), Lease: int64(s.Lease())}
	c.rec(withType(op, hc.OK))
	sleep(c.run, *work)
	return c.endDelivery(q, d, op)
}

// endDelivery ends d's claim as workQueue says, and records it.
func (c *client) endDelivery(q *recipes.WorkQueue, d *recipes.Delivery, op hc.Op) error {
	seq := d.Value()[strings.LastIndexByte(d.Value(), '.')+1:]
	n, _ := strconv.Atoi(seq)
	r := rand.IntN(20)
	ctx, cancel := context.WithTimeout(c.life, opTimeout)
	defer cancel()
	var err error
	if r == 1 {
		// A consumer that hangs: its session stops renewing and its
		// lease expires (the claim with it) before it acks; the ack must
		// fail and change nothing.
		c.sess.Orphan()
		sleep(c.run, time.Duration(*ttl)*time.Second+1500*time.Millisecond)
	}
	switch {
	case r == 0:
		c.rec(withType(withF(op, fWQDrop), hc.OK))
		c.closeSession()
		return nil
	case r > 1 && r < 5 || n%10 == 7 && r != 1:
		op.F = fWQNack
		c.rec(withType(op, hc.Invoke))
		err = d.Nack(ctx, rand.N(200*time.Millisecond))
	default:
		op.F = fWQAck
		c.rec(withType(op, hc.Invoke))
		var resp *clientv3.TxnResponse
		resp, err = d.AckTxn(ctx, clientv3.OpPut(wqEffectKey(d.Value()), strconv.FormatInt(d.Token(), 10)))
		if err == nil {
			op.Rev = resp.Header.Revision
		}
	}
	switch {
	case err == nil:
		c.rec(withType(op, hc.OK))
	case errors.Is(err, recipes.ErrClaimLost):
		op.Err = errText(err)
		c.rec(withType(op, hc.Fail))
	default:
		op.Err = errText(err)
		c.rec(withType(op, hc.Info))
	}
	return err
}

func withType(op hc.Op, t string) hc.Op { op.Type = t; return op }
func withF(op hc.Op, f string) hc.Op    { op.F = f; return op }
