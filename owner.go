package concurrency

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// Owner says who holds a session's keys, for operators: a session created
// WithOwner records it once, beside its lease, and Inspect (and etcdlock
// inspect) shows it for every key on that lease, whatever the kind of lock:
// Mutex, Semaphore, RWMutex, Election candidate or leader.
type Owner struct {
	Host  string `json:"host,omitempty"`  // the host name, as os.Hostname
	PID   int    `json:"pid,omitempty"`   // the process ID
	Label string `json:"label,omitempty"` // free-form: a service, a job, a pod
}

// ProcessOwner returns an Owner for the calling process: its host name
// (empty if os.Hostname fails), its process ID, and label.
func ProcessOwner(label string) Owner {
	host, _ := os.Hostname()
	return Owner{Host: host, PID: os.Getpid(), Label: label}
}

// OwnerPrefix is where owner records live: a session created WithOwner
// writes OwnerPrefix followed by its lease ID in hex ("%x", as a Mutex key
// names it), with the Owner in JSON as its value, attached to the lease.
// The record is outside every lock name a program would choose, so no
// lock and no other client (etcd's package, etcdctl) sees it, and it
// vanishes with the lease; do not name a lock "/_concurrency" or
// "/_concurrency/owner", whose queues would hold the records (a lock name
// is a key prefix).
//
// On a cluster with authentication, the session's user needs write
// permission on the prefix for its record to be written, and Inspect's
// user read permission to show it; without either, Inspect shows no
// owners. etcd lets only a user who may write every key attached to a
// lease revoke it (etcd #8031): a written record is one more such key, so
// an operator whose role covers only the lock names cannot revoke an owned
// session's lease (etcdctl lease revoke) and must delete its lock key
// instead (etcdlock force-unlock).
const OwnerPrefix = "/_concurrency/owner/"

// maxOwnerSize bounds an owner record (its JSON), so that a label cannot
// make every session write a large key.
const maxOwnerSize = 1024

// ownerKey is the key of the owner record of lease id, named as a Mutex
// key is.
func ownerKey(id clientv3.LeaseID) string { return leaseKey(OwnerPrefix, id) }

// ownerRecord is the value WithOwner writes for o.
func ownerRecord(o Owner) (string, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return "", err
	}
	if len(b) > maxOwnerSize {
		return "", fmt.Errorf("%w: its record is %d bytes, more than %d", ErrInvalidOwner, len(b), maxOwnerSize)
	}
	return string(b), nil
}

// recordOwner writes the owner record of a new session, whose lease is
// renewed already, asked as ask does (a put applied twice writes the same
// record on the same lease; applied late, after the lease was revoked, it
// is refused), within gctx, NewSession's bound (see newSessionTimeout). It
// returns an error only when ctx, NewSession's, ended: the put is then
// undone as far as it can be (the lease revoked if NewSession granted it;
// on an adopted lease, the record deleted if it is still this one), on a
// fresh context bounded by cleanupTimeout. Any other failure is logged
// through the client's logger, and the session goes on without the
// record.
func (s *Session) recordOwner(ctx, gctx context.Context, record string) error {
	key := ownerKey(s.id)
	_, _, err := sessionAsk(gctx, s, request.Write, func(ctx context.Context) (*clientv3.PutResponse, error) {
		return s.client.Put(ctx, key, record, clientv3.WithLease(s.id))
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil:
		s.client.GetLogger().Warn("concurrency: WithOwner: the owner record was not written; the session goes on without it",
			zap.String("key", key), zap.Error(err))
		return nil
	}
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer ccancel()
	if s.opts.leaseID == clientv3.NoLease {
		s.client.Revoke(cctx, s.id)
	} else {
		s.client.Txn(cctx).
			If(clientv3.Compare(clientv3.Value(key), "=", record), clientv3.Compare(clientv3.LeaseValue(key), "=", s.id)).
			Then(clientv3.OpDelete(key)).
			Commit()
	}
	return fmt.Errorf("concurrency: NewSession: owner record: %w", err)
}

// maxTxnOps is how many operations a transaction of this package holds
// (readOwners' reads, a Shards member's yield requests), below etcd's
// default limit of 128 operations per transaction.
const maxTxnOps = 100

// String returns the owner as "label pid PID on HOST", leaving out what is
// unknown, or "" when nothing is known.
func (o Owner) String() string {
	var parts []string
	if o.Label != "" {
		parts = append(parts, o.Label)
	}
	if o.PID != 0 {
		parts = append(parts, "pid "+strconv.Itoa(o.PID))
	}
	if o.Host != "" {
		parts = append(parts, "on "+o.Host)
	}
	return strings.Join(parts, " ")
}
