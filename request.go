package concurrency

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file is the root's side of the request layer, which lives in
// internal/request (so that the compiler keeps it below everything else):
// ask, which fills in the client's state (see stateOf), and the short
// name of the request layer's backoff. Everything else the upper floors
// call by its own name (request.Transient, request.Retry, …).

// backoff is request.Backoff: a wait between attempts that doubles.
type backoff = request.Backoff

// ask is request.Ask on client, with its state's answers: it sends a
// request with op (each attempt on the context it is given) and returns
// the first answer of an attempt and how many attempts were sent. d is the
// caller's liveness wait (see liveness), c the request's class.
func ask[T any](ctx context.Context, client *clientv3.Client, d time.Duration, c int, op func(ctx context.Context) (T, error)) (v T, sent int, err error) {
	return request.Ask(ctx, spec(client, d, c), op)
}

// spec is what request.Ask takes to send a request as ask does.
func spec(client *clientv3.Client, d time.Duration, c int) request.Spec {
	return request.Spec{Client: client, Answers: &stateOf(client).answers, Wait: d, Class: c}
}
