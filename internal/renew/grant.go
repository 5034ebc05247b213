package renew

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

// This file holds the grant of a lease with an ID picked here, so that an
// attempt applied twice grants nothing new.

// Grant grants a lease of ttl seconds on client, whose requests have
// shown ans lately (see request.Ask), with d as the liveness wait, and
// returns its ID and the TTL granted. The ID is picked here, at random,
// not by etcd, so that every attempt of the grant (see request.Ask) asks
// for the same lease: an attempt that etcd applies after another was
// applied is refused (the lease exists) and grants nothing, so no lease is
// granted that nobody knows of. An attempt refused so after another was
// sent counts as granted, and the lease's TTL is read; a refusal of the
// only attempt sent is an ID that another client picked, and another ID is
// tried. An attempt applied after the lease was revoked grants it anew,
// with no key, until its TTL runs out. Transient failures (see
// request.Transient) are retried until ctx ends.
//
// A client without a gRPC connection of its own (clientv3.NewCtxClient, as
// etcd's v3client serves an embedded server in process, with no network
// between) cannot send a grant with an ID: its one attempt is sent
// through its Lease, as etcd's package sends it.
func Grant(ctx context.Context, client *clientv3.Client, ans *request.Answers, d time.Duration, ttl int64) (clientv3.LeaseID, int64, error) {
	conn := client.ActiveConnection()
	if conn == nil {
		var resp *clientv3.LeaseGrantResponse
		err := request.Retry(ctx, func() (err error) {
			resp, err = client.Grant(ctx, ttl)
			return err
		})
		if err != nil {
			return 0, 0, err
		}
		return resp.ID, resp.TTL, nil
	}
	lc := pb.NewLeaseClient(conn)
	write := request.Spec{Client: client, Answers: ans, Wait: d, Class: request.Write}
	read := request.Spec{Client: client, Answers: ans, Wait: d, Class: request.Read}
	for {
		id := clientv3.LeaseID(rand.Int64N(math.MaxInt64-1) + 1)
		var resp *pb.LeaseGrantResponse
		var sent int
		err := request.Retry(ctx, func() (err error) {
			var n int
			resp, n, err = request.Ask(ctx, write, func(ctx context.Context) (*pb.LeaseGrantResponse, error) {
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
			ttlResp, _, err := request.Ask(ctx, read, func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
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
