package concurrency

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the leases that the package grants and revokes: a
// session's own (granted by NewSession, renewed in renewal.go), and a max
// hold's or a lock-delay's, which nobody renews. A grant names its lease,
// so that an attempt applied twice grants nothing new (see grantLease).

// grantFor grants a lease of its own for d, rounded up to whole seconds,
// that nobody renews (a max hold's, a lock-delay's), as grantLease does.
func (s *Session) grantFor(ctx context.Context, d time.Duration) (clientv3.LeaseID, error) {
	id, _, err := grantLease(ctx, s.client, s.live().Wait, int64((d+time.Second-1)/time.Second))
	return id, err
}

// grantLease grants a lease of ttl seconds and returns its ID and the TTL
// granted. The ID is picked here, at random, not by etcd, so that every
// attempt of the grant (see ask) asks for the same lease: an attempt that
// etcd applies after another was applied is refused (the lease exists)
// and grants nothing, so no lease is granted that nobody knows of. An
// attempt refused so after another was sent counts as granted, and the
// lease's TTL is read; a refusal of the only attempt sent is an ID that
// another client picked, and another ID is tried. An attempt applied
// after the lease was revoked grants it anew, with no key, until its TTL
// runs out. Transient failures (see transient) are retried until ctx
// ends.
//
// A client without a gRPC connection of its own (clientv3.NewCtxClient, as
// etcd's v3client serves an embedded server in process, with no network
// between) cannot send a grant with an ID: its one attempt is sent
// through its Lease, as etcd's package sends it.
func grantLease(ctx context.Context, client *clientv3.Client, d time.Duration, ttl int64) (clientv3.LeaseID, int64, error) {
	conn := client.ActiveConnection()
	if conn == nil {
		var resp *clientv3.LeaseGrantResponse
		err := retry(ctx, func() (err error) {
			resp, err = client.Grant(ctx, ttl)
			return err
		})
		if err != nil {
			return 0, 0, err
		}
		return resp.ID, resp.TTL, nil
	}
	lc := pb.NewLeaseClient(conn)
	for {
		id := clientv3.LeaseID(rand.Int64N(math.MaxInt64-1) + 1)
		var resp *pb.LeaseGrantResponse
		var sent int
		err := retry(ctx, func() (err error) {
			var n int
			resp, n, err = ask(ctx, client, d, classWrite, func(ctx context.Context) (*pb.LeaseGrantResponse, error) {
				resp, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl, ID: int64(id)})
				return resp, request.RPCErr(ctx, err)
			})
			sent += n
			return err
		})
		switch {
		case err == nil:
			return id, resp.TTL, nil
		case errors.Is(err, rpctypes.ErrLeaseExist) && sent > 1:
			ttlResp, _, err := ask(ctx, client, d, classRead, func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
				return client.TimeToLive(ctx, id)
			})
			if err != nil {
				return 0, 0, err
			}
			return id, ttlResp.GrantedTTL, nil
		case errors.Is(err, rpctypes.ErrLeaseExist):
			continue
		default:
			return 0, 0, err
		}
	}
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
	err := retry(ctx, func() error {
		_, _, err := sessionAsk(ctx, s, classWrite, func(ctx context.Context) (*clientv3.LeaseRevokeResponse, error) {
			return s.client.Revoke(ctx, lease)
		})
		return err
	})
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}
