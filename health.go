package concurrency

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds health-driven release (Consul's session health checks):
// a session that runs a check at an interval and, after a number of
// failures in a row, ends and revokes its lease, so that every hold on it
// ends at once, in this process and in etcd. A stuck process stops
// holding locks even though its keepalive goroutine is fine.

// healthCheck is what WithHealthCheck configures.
type healthCheck struct {
	interval time.Duration
	failures int
	check    func(ctx context.Context) error
}

// valid reports bad options of hc with ErrInvalidHealthCheck.
func (hc *healthCheck) valid() error {
	switch {
	case hc.interval <= 0:
		return fmt.Errorf("%w: interval %v", ErrInvalidHealthCheck, hc.interval)
	case hc.failures < 1:
		return fmt.Errorf("%w: %d failures", ErrInvalidHealthCheck, hc.failures)
	case hc.check == nil:
		return fmt.Errorf("%w: nil check", ErrInvalidHealthCheck)
	}
	return nil
}

// healthCloseWait bounds how long the end of a session waits for a health
// check still running (see WithHealthCheck).
const healthCloseWait = time.Second

// checkHealth is the session's health goroutine (see WithHealthCheck): it
// runs until the session ends or is orphaned, and then waits for a check
// still running, healthCloseWait at most.
func (s *Session) checkHealth(hc *healthCheck) {
	defer s.done.Done()
	tick := time.NewTicker(hc.interval)
	defer tick.Stop()
	var running chan error // the call in flight, if one outlived its context
	defer func() { awaitCheck(running) }()
	failed := 0
	var mod int64 // the health record's mod revision as last written; see recordHealth
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		var err error
		running, err = s.runCheck(hc, running)
		if s.ctx.Err() != nil {
			return
		}
		if err == nil {
			if failed > 0 {
				failed = 0
				s.recordHealth(&mod, failed, hc.failures, nil)
			}
			continue
		}
		if failed++; failed < hc.failures {
			s.recordHealth(&mod, failed, hc.failures, err)
			continue
		}
		s.endLife(fmt.Errorf("%w: lease %x: %w: %d health checks in a row failed, the last: %w", ErrSessionExpired, int64(s.id), ErrUnhealthy, failed, err))
		s.revoke(s.id)
		return
	}
}

// runCheck runs hc's check once, with a context that ends after the
// interval, unless the call before (running, if not nil) has still not
// returned: that counts as a failure. It returns the check's error, and
// the call still in flight (nil if none).
func (s *Session) runCheck(hc *healthCheck, running chan error) (chan error, error) {
	if running != nil {
		select {
		case <-running: // returned since; counted when it ran late
		default:
			return running, fmt.Errorf("%w: the check has still not returned, %v after the last", context.DeadlineExceeded, hc.interval)
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, hc.interval)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- hc.check(ctx)
	}()
	select {
	case err := <-done:
		return nil, err
	case <-ctx.Done():
		return done, fmt.Errorf("%w: the check has not returned within %v", context.DeadlineExceeded, hc.interval)
	}
}

// awaitCheck waits for a check still running (if not nil) when the
// health goroutine ends, healthCloseWait at most: its goroutine ends when
// it returns (its channel is buffered).
func awaitCheck(running chan error) {
	if running == nil {
		return
	}
	wait := time.NewTimer(healthCloseWait)
	defer wait.Stop()
	select {
	case <-running:
	case <-wait.C:
	}
}

// HealthPrefix is the prefix of the keys in which a session whose health
// checks fail (WithHealthCheck) says so while it still lives: HealthPrefix
// followed by its lease ID in hex, on that lease, holding a Health in
// JSON. The key is written at each failure, and written with no failures
// at the next success (a delete could be undone by a failure's write that
// etcd applies late); it goes with the lease when the session ends.
// Inspect shows it, while it counts failures, for every key on that
// lease.
const HealthPrefix = "/_concurrency/health/"

// Health is the state of a session whose health checks are failing, as
// Inspect shows it (QueueKey.Health).
type Health struct {
	Failures int    `json:"failures"` // failures in a row so far
	Limit    int    `json:"limit"`    // the session ends at this many
	Err      string `json:"error"`    // the last failure
}

// healthKey is the health record of the session on lease id.
func healthKey(id clientv3.LeaseID) string { return HealthPrefix + strconv.FormatInt(int64(id), 16) }

// recordHealth writes the health record of the session: failed failures
// in a row, of limit, the last err (failed 0: none, the checks pass
// again). It is best effort: asked as ask does, within the session's
// renewal timeout, its error ignored (the record only informs). Only this
// session writes its record, and each write applies only if the record's
// mod revision is *mod, the one its last write left (0: no record yet; -1:
// unknown after a write whose answer was lost, read first), so that a
// write applied twice or late, after a later one, changes nothing. The
// record is never deleted while the session lives (a late write of a
// failure could create it again after the delete): a passing check
// writes it with no failures, which Inspect shows as none.
func (s *Session) recordHealth(mod *int64, failed, limit int, err error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.renewTimeout())
	defer cancel()
	key := healthKey(s.id)
	h := Health{Failures: failed, Limit: limit}
	if err != nil {
		h.Err = err.Error()
	}
	v, _ := json.Marshal(h)
	for range 2 {
		if *mod < 0 {
			resp, err := s.get(ctx, key)
			if err != nil {
				return
			}
			*mod = 0
			if len(resp.Kvs) > 0 {
				*mod = resp.Kvs[0].ModRevision
			}
		}
		resp, _, err := sessionAsk(ctx, s, request.Write, func(ctx context.Context) (*clientv3.TxnResponse, error) {
			return s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", *mod)).
				Then(clientv3.OpPut(key, string(v), clientv3.WithLease(s.id))).
				Commit()
		})
		switch {
		case err != nil:
			*mod = -1
			return
		case resp.Succeeded:
			*mod = resp.Header.Revision
			return
		}
		*mod = -1 // written since by an attempt of an earlier write: read it, and write again
	}
}

// parseHealth reads the health record kv: the lease of the session it
// reports on and the record. ok is false for a record not as recordHealth
// writes it (written by hand): a key other than healthKey of its own lease
// (one that names the lease as "01f" or "1F", or another lease), or a
// value that is not a Health.
func parseHealth(kv *mvccpb.KeyValue) (id clientv3.LeaseID, h *Health, ok bool) {
	id = clientv3.LeaseID(kv.Lease)
	h = new(Health)
	if string(kv.Key) != healthKey(id) || json.Unmarshal(kv.Value, h) != nil {
		return 0, nil, false
	}
	return id, h, true
}
