package concurrency

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/renew"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the leases that the package grants and revokes: a
// session's own (granted by NewSession, renewed in keepalive.go), and a
// max hold's or a lock-delay's, which nobody renews. A grant names its
// lease, so that an attempt applied twice grants nothing new (see
// renew.Grant).

// grantFor grants a lease of its own for d, rounded up to whole seconds,
// that nobody renews (a max hold's, a lock-delay's), as grantLease does.
func (s *Session) grantFor(ctx context.Context, d time.Duration) (clientv3.LeaseID, error) {
	id, _, err := grantLease(ctx, s.client, s.live().Wait, int64((d+time.Second-1)/time.Second))
	return id, err
}

// grantLease is renew.Grant on client, with its state's answers: it
// grants a lease of ttl seconds, with an ID picked here, and returns its
// ID and the TTL granted.
func grantLease(ctx context.Context, client *clientv3.Client, d time.Duration, ttl int64) (clientv3.LeaseID, int64, error) {
	return renew.Grant(ctx, client, &stateOf(client).answers, d, ttl)
}

// revoke revokes lease, a max hold's (see hold.bound), within
// cleanupTimeout; if it fails, the lease expires by itself. A revoke
// applied twice or late finds the lease gone.
func (s *Session) revoke(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.opts.ctx), cleanupTimeout)
	defer cancel()
	defer context.AfterFunc(s.client.Ctx(), cancel)() // a closed client revokes nothing
	_ = s.revokeLease(ctx, lease)
}

// revokeLease revokes lease, retried while etcd is unreachable, until ctx
// ends. A lease already gone is no error.
func (s *Session) revokeLease(ctx context.Context, lease clientv3.LeaseID) error {
	err := request.Retry(ctx, func() error {
		_, _, err := sessionAsk(ctx, s, request.Write, func(ctx context.Context) (*clientv3.LeaseRevokeResponse, error) {
			return s.client.Revoke(ctx, lease)
		})
		return err
	})
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}
