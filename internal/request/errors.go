package request

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file holds the request layer's errors, and what it counts as a
// failure that may pass (Transient).

// ErrClientClosed is the concurrency package's ErrClientClosed (the same
// value; its doc comment is there): defined here, by its lowest user.
var ErrClientClosed = errors.New("concurrency: client closed")

// ErrNoAnswer says that etcd did not answer in time on a connection that
// may be dead: a watch's stream asked for progress (see the watches'
// probe). What waits tries again, on another connection.
var ErrNoAnswer = errors.New("concurrency: no answer from etcd in time")

// ClientClosed is the error of a call whose client is closed: it matches
// ErrClientClosed and context.Canceled (what clientv3 returns for a
// closed client's requests).
func ClientClosed(client *clientv3.Client) error {
	return fmt.Errorf("%w: %w", ErrClientClosed, context.Cause(client.Ctx()))
}

// RPCErr is err, of a request sent with etcd's gRPC API on ctx rather
// than through clientv3, as clientv3 returns it: etcd's own errors as
// rpctypes' values, and ctx's error when ctx ended.
func RPCErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return rpctypes.Error(err)
}

// Transient reports whether err is a failure of the cluster or of the
// connection that a later attempt may not meet: the member has no leader,
// the leader changed, the request timed out on the server, the connection
// failed or was reset (all gRPC Unavailable), or the server is too busy
// for now ("too many requests", ResourceExhausted: waiting is what fixes
// it), or no answer came in time on a connection that may be dead
// (ErrNoAnswer: a watch's stream asked for progress). Context errors,
// refusals (lease not found, permission denied, compaction) and
// everything else are not transient.
func Transient(err error) bool {
	if errors.Is(err, ErrNoAnswer) {
		return true
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	c := GRPCCode(err)
	return c == codes.Unavailable || c == codes.ResourceExhausted
}

// GRPCCode is the gRPC code of err: etcd's own errors carry theirs, others
// their status's.
func GRPCCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	return status.Code(err)
}
