package concurrency

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file is the root's side of the request layer, which lives in
// internal/request (so that the compiler keeps it below everything else):
// the names by which the package's upper floors ask, classify failures
// and back off, each the request layer's own, with the client's state
// (see stateOf) filled in where the request layer needs it.

// The classes of requests (see request.Read).
const (
	classRead  = request.Read
	classWrite = request.Write
	classRenew = request.Renew
)

// retryInterval is request.RetryInterval: the longest wait between two
// attempts of an operation that failed for a reason that may pass.
const retryInterval = request.RetryInterval

// backoff is request.Backoff: a wait between attempts that doubles.
type backoff = request.Backoff

// ask is request.Ask on client, with its state's answers: it sends a
// request with op (each attempt on the context it is given) and returns
// the first answer of an attempt and how many attempts were sent. d is the
// caller's liveness wait (see liveness), c the request's class.
func ask[T any](ctx context.Context, client *clientv3.Client, d time.Duration, c int, op func(ctx context.Context) (T, error)) (v T, sent int, err error) {
	return request.Ask(ctx, request.Spec{Client: client, Answers: &stateOf(client).answers, Wait: d, Class: c}, op)
}

// clientClosed is request.ClientClosed: the error of a call whose client
// is closed, matching ErrClientClosed and context.Canceled.
func clientClosed(client *clientv3.Client) error { return request.ClientClosed(client) }

// transient is request.Transient: whether err is a failure that a later
// attempt may not meet.
func transient(err error) bool { return request.Transient(err) }

// grpcCode is request.GRPCCode: the gRPC code of err.
func grpcCode(err error) codes.Code { return request.GRPCCode(err) }

// retry is request.Retry: op until its error is not transient or ctx
// ends.
func retry(ctx context.Context, op func() error) error { return request.Retry(ctx, op) }

// sleepCtx is request.SleepCtx: a wait for d or for ctx to end.
func sleepCtx(ctx context.Context, d time.Duration) bool { return request.SleepCtx(ctx, d) }

// pause is request.Pause: a wait for d, for ctx to end or for client to be
// closed.
func pause(ctx context.Context, client *clientv3.Client, d time.Duration) bool {
	return request.Pause(ctx, client, d)
}
