package concurrency

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/watch"
)

// This file is the root's side of the watches, which live in
// internal/watch (so that the compiler keeps them below everything but
// the request layer): the names by which the package's upper floors
// watch, each the watches' own, with the client's streams (see stateOf)
// filled in.

// liveness is watch.Liveness: how long the package trusts a connection to
// etcd that says nothing.
type liveness = watch.Liveness

// watchOn is what a watch of client with liveness l, ended by life if not
// nil, is opened with.
func watchOn(client *clientv3.Client, l liveness, life context.Context) watch.Spec {
	return watch.Spec{Streams: stateOf(client).streams, Live: l, Life: life}
}

// watchUntil is watch.Until on client: it watches key with opts until fn
// returns true or an error (see there).
func watchUntil(ctx context.Context, life context.Context, client *clientv3.Client, l liveness, key string, b *backoff, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	return watch.Until(ctx, watchOn(client, l, life), key, b, fn, opts...)
}

// watchAfter is watch.After on client: watchUntil for a caller that needs
// every event after revision rev.
func watchAfter(ctx context.Context, client *clientv3.Client, l liveness, key string, rev int64, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	return watch.After(ctx, watchOn(client, l, nil), key, rev, fn, opts...)
}

// openWatch is watch.Open on client: a watch of key with opts on the
// client's current stream, for a caller that reads its channel itself.
func openWatch(ctx context.Context, life context.Context, client *clientv3.Client, l liveness, key string, opts ...clientv3.OpOption) (*watch.Watch, error) {
	return watch.Open(ctx, watchOn(client, l, life), key, opts...)
}
