package concurrency

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds partitioned work (Shards): n shards of a named group
// spread over the members that run Shards on it, each shard a Mutex, each
// member owning its fair share by weight. A shard's safety is its Mutex's
// (at most one holder per shard at any revision; the token is the hold's);
// the rest only decides which member queues for which shard: the plan in
// shardplan.go, the member at work in shardmember.go, the group's keys
// (their layout and their parse) in shardkeys.go.

// Limits of a group, checked by Shards, InspectShards and WatchShards
// (and WithShardWeight) before anything is read or written. They also bound
// what a member takes from another process's member key: a count outside
// [1, MaxShardCount] or a weight below 1 makes the key no member at all
// (ignored), and a weight above MaxShardWeight counts as MaxShardWeight.
// With both bounds, n*weight fits in 2^32 and the plan never overflows.
const (
	// MaxShardCount is the largest shard count of a group (65536).
	MaxShardCount = 1 << 16
	// MaxShardWeight is the largest weight of a member (65536).
	MaxShardWeight = 1 << 16
)

// Shard is a shard that a member of a group owns, as Shards gives it to
// its function: its number, its fencing token and a guarded transaction.
// It stays valid after the ownership ended: Token still returns the
// tenure's token, and Txn no longer commits.
type Shard struct {
	id    int
	token int64
	m     *Mutex
}

// ID returns the shard's number, from 0 to the group's count less one.
func (sh Shard) ID() int { return sh.id }

// Token returns the shard's fencing token for this tenure: the create
// revision of its Mutex key (Mutex.Token). Tokens of one shard strictly
// increase from one owner to the next.
func (sh Shard) Token() int64 { return sh.token }

// Key returns the shard's Mutex key while it is owned, and "" once the
// ownership has been released.
func (sh Shard) Key() string { return sh.m.Key() }

// IsOwner returns a comparison that holds, in a transaction, only while
// this tenure of the shard lasts (Mutex.IsOwner).
func (sh Shard) IsOwner() clientv3.Cmp { return sh.m.IsOwner() }

// Txn returns a transaction that commits only while this tenure of the
// shard lasts, as Mutex.Txn and Election.Txn do: once it has ended, Commit
// returns an error matching ErrLockLost and nothing is written.
func (sh Shard) Txn(ctx context.Context) clientv3.Txn { return sh.m.Txn(ctx) }

// Shards joins the group named group, of n shards, and calls fn, each in
// its own goroutine, for every shard this member comes to own. It blocks
// until ctx ends, fn returns an error while its shard is owned, or an
// error that retrying cannot fix; it returns only after every fn has
// returned and every shard has been released.
//
// Each shard is a Mutex named group/shard/<i>, so at any etcd revision at
// most one member owns it, as a Mutex is held. A member registers, on its
// session's lease, as group/members/<lease ID in hex>; the live members,
// in the order of those keys' create revisions, split the n shards by
// weight (WithShardWeight; largest remainders, ties to the older member),
// so that each member's share is within one of n times its weight over
// the total. A member below its share queues for as many shards as it
// lacks, no more: first shards nobody owns, then the shards of members
// above their share, whose owners it asks to hand them over
// (RequestYield's request, written for that one hold) once its own key
// waits behind theirs. It never takes a shard: it gets one only when the
// owner lets go. A member above its share keeps its shards until asked.
// Every member computes the same plan from the same keys, so the shards
// that move are exactly the surplus. Each member reads the group's keys
// once and keeps them from a watch, planning again after events (plans
// at least 20 ms, and four times the last plan's cost, apart); it reads
// them again, with a new watch, every third of the TTL (1 s to 20 s) and
// after a failure.
//
// Bounds, while at least one member is live: a shard whose owner left by
// its ctx is owned again after about one commit and a plan; one whose
// owner crashed, once etcd expires the owner's lease (a TTL after its
// last renewal) and a plan; a member cut off from etcd ends its functions
// at its session's conservative deadline, before that. Once membership is
// stable, every member owns exactly its share after a few plans and
// commits per shard moved (BENCHMARKS.md measures them).
//
// fn is called with a Shard (its number, token and guarded Txn) and a
// context that ends when the ownership ends or may have ended, with the
// hold's cause: ErrYieldRequested when it is handed to another member,
// ErrLockLost when its key was deleted, ErrSessionExpired (wrapping
// ErrUnhealthy after failed health checks) when the member's session
// ended or its conservative deadline passed; and, when ctx ends, ctx's
// cause. fn is never called for a shard while an earlier call for the
// same shard still runs in this process.
//
// How a call of fn ends decides what happens next:
//
//   - its context ended (the shard was lost or handed over, or ctx ended):
//     its error is dropped, the shard is released (one commit, so that the
//     next owner starts at once), and the member plans again;
//   - it returned nil while the shard is still owned: the member keeps the
//     shard, idle, until it is lost, handed over or ctx ends (work that
//     is done for this tenure);
//   - it returned an error while the shard is still owned: Shards leaves
//     the group as when ctx ends, and returns that error.
//
// When the member's session ends (lease revoked or expired, failed
// health checks), every shard's fn is cancelled; once all have returned,
// Shards joins again on a new session after a backoff (100 ms doubling to
// 5 s, as Lead's), behind the members already there.
//
// Leaving, when ctx ends or fn failed: Shards deletes the member key first
// (so that no one plans to give it shards), then cancels every fn, waits
// for them, and releases each shard as it returns (one commit each, in
// parallel), and closes the session, each cleanup bounded by 5 s on a
// fresh context. It returns an error matching ctx.Err() when ctx ended;
// the errors of functions whose context had ended are dropped (they
// usually only report the cancellation; fn should record anything else
// itself), as Lead drops them.
//
// A function that ignores its context outlives its ownership: another
// member may own the shard meanwhile (safe for writes through Txn or
// fenced by Token, and only for those). WithShardStatus reports it, as
// LeaderStatus.Check reports a stuck term. Shards cannot return, nor join
// again after its session ended, before such a function does.
//
// The group's name is a key prefix (group/), as a lock's name is: use it
// for nothing else, and give groups names that are not prefixes of one
// another or of lock names.
//
// Bad input is reported at once, before Shards talks to etcd: a nil
// client (ErrNilClient), an empty group (ErrInvalidPrefix), n outside
// [1, MaxShardCount] (ErrInvalidShardCount), a nil fn (ErrNilFunc), and
// the options' own errors. Failures to start a session or to read are
// retried until ctx ends, as in Lead.
//
// A group has one shard count, settled by etcd's order: a live member of
// the group that runs another count makes Shards return an error matching
// ErrInvalidShardCount when it joins; and when two members of different
// counts join at once (both see no other before writing their keys), the
// younger (the later create revision of its member key) sees the older
// after its own write, or in any later plan, and leaves with that error,
// releasing whatever it holds. A member never asks a member of another
// count to yield a shard; it waits for it. Member keys that do not parse,
// or with a count out of range, are not members (MaxShardCount).
//
// A client closed while Shards runs ends the member's session at once, and
// so the contexts of the shards' functions; once they have returned,
// Shards returns an error matching ErrClientClosed (the keys stay until
// the lease expires: a closed client revokes nothing).
func Shards(ctx context.Context, cli *clientv3.Client, group string, n int, fn func(ctx context.Context, sh Shard) error, opts ...ShardOption) error {
	if err := validGroup(cli, group, n); err != nil {
		return err
	}
	if fn == nil {
		return ErrNilFunc
	}
	o := shardOptions{weight: 1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return o.err
	}
	o.settle()
	if err := ctx.Err(); err != nil {
		return err
	}
	g := &shardMember{cli: cli, group: group, n: n, fn: fn, o: &o}
	var backoff retryBackoff
	for {
		since := time.Now()
		retry, err := g.join(ctx)
		if !retry {
			return err
		}
		if cli.Ctx().Err() != nil { // the membership ended with its session
			return fmt.Errorf("concurrency: Shards: %w", request.ClientClosed(cli))
		}
		backoff.resetAfter(time.Since(since))
		if !request.Pause(ctx, cli, backoff.next()) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("concurrency: Shards: %w", request.ClientClosed(cli))
		}
	}
}
