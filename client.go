package concurrency

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/renew"
	"github.com/seed-a9d410c6/concurrency/internal/request"
	"github.com/seed-a9d410c6/concurrency/internal/watch"
)

// This file holds what the package keeps per etcd client: one state,
// created by the first call that needs it, and forgotten once, when the
// client is closed.

// clientState is what the package keeps of one client: what its
// requests have shown lately (see ask), the streams of its watches (see
// watchUntil), and the renewer of its sessions' leases (see useRenewer).
type clientState struct {
	answers  request.Answers
	streams  *watch.Streams
	renewers renew.Shared
}

// clients holds each client's state, until the client is closed.
var clients sync.Map // *clientv3.Client → *clientState

// stateOf returns client's state. The first call for a client creates it
// and forgets it when the client is closed; a call after that creates a
// state of its own, forgotten at once (a closed client's calls fail).
func stateOf(client *clientv3.Client) *clientState {
	if st, ok := clients.Load(client); ok {
		return st.(*clientState)
	}
	st, loaded := clients.LoadOrStore(client, &clientState{streams: watch.NewStreams(client)})
	if !loaded {
		context.AfterFunc(client.Ctx(), func() { clients.Delete(client) })
	}
	return st.(*clientState)
}
