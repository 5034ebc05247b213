package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// shardCount is the shards workload's number of shards.
const shardCount = 8

// shards runs the shards workload: concurrency.Shards on the group
// lockName("shards") for the whole run, each membership lasting 2 to 8 s
// before it leaves by its ctx and joins again, so that shards move by
// join (yield) and leave as well as by the faults. Each tenure of a shard
// is recorded as a lock of the shard's Mutex key (FLock ok, with its
// token, and the revision of its first guarded write, at which the
// tenure was current), and its guarded writes as increments, under a
// client name of its own per shard (calls of one shard never overlap in a
// process); the harness checks each shard's tenures and writes against
// the shard's keys in etcd: at most one owner at any revision, tokens
// increasing.
func (c *client) shards() {
	var seq atomic.Int64
	fn := func(ctx context.Context, sh concurrency.Shard) error {
		// Calls of one shard are sequential: a client of their own. The
		// tenure's record has a client of its own too, whose previous
		// record (an earlier tenure's, or none) is the earliest its call
		// could have started: hc.Calls takes that as its start, and the
		// revision clock of the models needs a start before the revision
		// it saw (the shard's write just before would start it after).
		sc := &client{worker: c.worker, wl: c.wl, name: fmt.Sprintf("%s/%d", c.name, sh.ID())}
		tc := &client{worker: c.worker, wl: c.wl, name: fmt.Sprintf("%s/tenure/%d", c.name, sh.ID())}
		key := sh.Key()
		// Register the lease (the key's last part), as session() does.
		if id, err := strconv.ParseInt(key[strings.LastIndexByte(key, '/')+1:], 16, 64); err == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c.cli.Put(rctx, regKey(clientv3.LeaseID(id)), strconv.Itoa(*proc), clientv3.WithLease(clientv3.LeaseID(id)))
			cancel()
		}
		held := false
		for ctx.Err() == nil {
			// The write does not look at ctx: the guard alone keeps it
			// inside the tenure.
			id := fmt.Sprintf("%s.%d", sc.name, seq.Add(1))
			tctx, cancel := context.WithTimeout(c.life, opTimeout)
			sc.rec(hc.Op{Type: hc.Invoke, F: hc.FIncr, ID: id, Token: sh.Token()})
			tr, err := sh.Txn(tctx).Then(clientv3.OpPut(fmt.Sprintf("%s/shardterm/%d", *pfx, sh.ID()), strconv.FormatInt(sh.Token(), 10))).Commit()
			cancel()
			sc.recGuarded(hc.Op{ID: id, Token: sh.Token()}, tr, err)
			if err == nil && !held {
				// The tenure, at a revision where its guard held.
				held = true
				tc.rec(hc.Op{Type: hc.OK, F: hc.FLock, Key: key, Token: sh.Token(), Rev: tr.Header.Revision})
			}
			sleep(ctx, *work)
		}
		return ctx.Err()
	}
	for round := 0; c.run.Err() == nil; round++ {
		if round%4 == 3 {
			c.rogueShards(fn, round/4)
			continue
		}
		ctx, cancel := context.WithTimeout(c.run, 2*time.Second+rand.N(6*time.Second))
		err := concurrency.Shards(ctx, c.cli, lockName(c.wl), shardCount, fn, concurrency.WithShardTTL(*ttl))
		cancel()
		if err != nil && ctx.Err() == nil {
			c.rec(hc.Op{Type: hc.Info, F: hc.FLock, Err: errText(err)})
			sleep(c.run, 50*time.Millisecond)
		}
	}
}

// rogueShards is a fault of the shards workload (issue 49): in turn, a
// member of another shard count (twice the group's), which either is
// refused (ErrInvalidShardCount: an older member runs the group's count)
// or, older than every member, makes the members that join meanwhile
// refused, until it leaves; and a member key written by hand with a
// weight far above concurrency.MaxShardWeight (1<<60), which the members
// count as MaxShardWeight, for 1 to 3 s. Either lasts at most 3 s; the
// checks of every shard stay as they are: at most one owner at any
// revision. What happened is recorded as an Info of FLock, for the
// summary.
func (c *client) rogueShards(fn func(context.Context, concurrency.Shard) error, turn int) {
	ctx, cancel := context.WithTimeout(c.run, time.Second+rand.N(2*time.Second))
	defer cancel()
	if turn%2 == 0 {
		err := concurrency.Shards(ctx, c.cli, lockName(c.wl), 2*shardCount, fn, concurrency.WithShardTTL(*ttl))
		c.rec(hc.Op{Type: hc.Info, F: hc.FLock, Err: "rogue member of another count: " + errText(err)})
		return
	}
	lease, err := c.cli.Grant(ctx, int64(*ttl))
	if err == nil {
		key := fmt.Sprintf("%s/members/%x", lockName(c.wl), int64(lease.ID))
		_, err = c.cli.Put(ctx, key, fmt.Sprintf("shards=%d weight=%d", shardCount, int64(1)<<60), clientv3.WithLease(lease.ID))
		<-ctx.Done()
		rctx, rcancel := context.WithTimeout(c.life, 2*time.Second)
		c.cli.Revoke(rctx, lease.ID)
		rcancel()
	}
	c.rec(hc.Op{Type: hc.Info, F: hc.FLock, Err: "rogue member key of weight 1<<60: " + errText(err)})
}
