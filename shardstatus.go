package concurrency

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// This file holds ShardStatus: which shards a Shards member owns, and
// whether a shard's function outlived its ownership.

// ShardStatus records which shards a Shards member owns and whether a
// shard's fn outlived its ownership, for operators: a liveness probe
// (Check) or a gauge (Owned). Its zero value is ready to use. It is safe
// for use by several goroutines.
type ShardStatus struct {
	mu     sync.Mutex // guards shards
	shards map[int]*shardTenure
}

// shardTenure is one owned shard, as ShardStatus records it.
type shardTenure struct {
	s       *Session
	token   int64
	running bool      // fn runs
	ended   time.Time // when the ownership ended or may have ended; zero while owned
}

// Owned returns the numbers of the shards this member owns now, in order:
// from the moment its Mutex was granted (just before fn was called) until
// the ownership ended or may have ended, or the shard was released. It
// never blocks on etcd.
func (st *ShardStatus) Owned() []int {
	st.mu.Lock()
	defer st.mu.Unlock()
	var ids []int
	for id, t := range st.shards {
		if t.ended.IsZero() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Token returns the fencing token of shard id's current ownership, or 0
// when this member does not own it.
func (st *ShardStatus) Token(id int) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.shards[id]; t != nil && t.ended.IsZero() {
		return t.token
	}
	return 0
}

// Check reports whether a shard's fn outlived its ownership, as
// LeaderStatus.Check does for a term: nil unless, for some shard, fn
// still runs more than tolerance past the conservative deadline of the
// member's session while it says owned (the process is too starved to
// notice), or more than tolerance after the ownership ended (fn ignores
// its context, and another member may own the shard). That is an error
// matching ErrLeaderStuck, naming the shard. Check never blocks and does
// not talk to etcd; a tolerance below 0 counts as 0.
func (st *ShardStatus) Check(tolerance time.Duration) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	tolerance = max(tolerance, 0)
	now := time.Now()
	var errs []error
	ids := make([]int, 0, len(st.shards))
	for id := range st.shards {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		t := st.shards[id]
		if !t.running {
			continue
		}
		if t.ended.IsZero() {
			if late := now.Sub(t.s.Deadline()); late > tolerance {
				errs = append(errs, fmt.Errorf("%w: shard %d owned %v past its session's conservative deadline", ErrLeaderStuck, id, late.Round(time.Millisecond)))
			}
		} else if late := now.Sub(t.ended); late > tolerance {
			errs = append(errs, fmt.Errorf("%w: shard %d: fn still runs %v after its ownership ended", ErrLeaderStuck, id, late.Round(time.Millisecond)))
		}
	}
	return errors.Join(errs...)
}

// begin records that shard id was granted on session s with token, and
// that its fn is about to run.
func (st *ShardStatus) begin(id int, s *Session, token int64) {
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.shards == nil {
		st.shards = make(map[int]*shardTenure)
	}
	st.shards[id] = &shardTenure{s: s, token: token, running: true}
}

// lost records that shard id's ownership ended, or may have ended, at when.
func (st *ShardStatus) lost(id int, when time.Time) {
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.shards[id]; t != nil && t.ended.IsZero() {
		t.ended = when
	}
}

// idle records that shard id's fn returned while the shard stays owned.
func (st *ShardStatus) idle(id int) {
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.shards[id]; t != nil {
		t.running = false
	}
}

// clear records that shard id is no longer owned and no fn runs for it.
func (st *ShardStatus) clear(id int) {
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.shards, id)
}
