package concurrency

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the session of a runner's term (a Lead's term, a Shards
// membership): started bound to the runner's ctx, closed once, and which
// errors end the runner rather than a term. Lead and Shards both use it,
// so that neither runner builds the other's state.

// startTermSession starts the session of one term on cli with opts (the
// runner's: WithTTL among them sets the TTL, default 60 s). WithContext
// and WithLease among opts are overridden: the session carries ctx's
// values but lives until the returned function closes it, on a lease of
// its own. NewSession's round trip ends when ctx does; the returned
// function revokes the lease within cleanupTimeout and may be called more
// than once. If ctx ended as the lease was granted, the lease is revoked
// (within cleanupTimeout) and ctx's error returned.
func startTermSession(ctx context.Context, cli *clientv3.Client, opts []SessionOption) (*Session, func() error, error) {
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	stopOnCtx := context.AfterFunc(ctx, scancel)
	s, err := NewSession(cli, append(slices.Clip(opts), WithContext(sctx), WithLease(clientv3.NoLease))...)
	if !stopOnCtx() || err != nil {
		if err == nil {
			s.Orphan() // ctx ended as the lease was granted: revoke it
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			cli.Revoke(ctx, s.Lease())
			cancel()
		}
		scancel()
		if err == nil {
			err = ctx.Err()
		}
		return nil, nil, err
	}
	var once sync.Once
	var cerr error
	closeSession := func() error {
		once.Do(func() {
			t := time.AfterFunc(cleanupTimeout, scancel)
			cerr = s.Close()
			t.Stop()
			scancel()
		})
		return cerr
	}
	return s, closeSession, nil
}

// termPermanent returns err, wrapped with who's name (the runner, as its
// errors say it), if retrying cannot fix it: a closed client (err may be
// nil then), authentication, permission denied; and nil otherwise.
func termPermanent(cli *clientv3.Client, who string, err error) error {
	if cli.Ctx().Err() != nil {
		if err == nil || !errors.Is(err, ErrClientClosed) {
			err = errors.Join(request.ClientClosed(cli), err)
		}
		return fmt.Errorf("concurrency: %s: %w", who, err)
	}
	if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty) ||
		errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrInvalidAuthToken) {
		return fmt.Errorf("concurrency: %s: %w", who, err)
	}
	if c := request.GRPCCode(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
		return fmt.Errorf("concurrency: %s: %w", who, err)
	}
	return nil
}

// termOptions is what a runner reads of its sessions' options before the
// first term: the TTL (for its watches' liveness and its reads' pace), the
// metrics recorder, the owner.
func termOptions(opts []SessionOption) sessionOptions {
	o := sessionOptions{ttl: defaultSessionTTL}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// termOptionsErr is the error of an option among opts that no session
// would take (an owner too large to record, a bad health check, max hold
// or lock delay), named by the runner's option that gave it (nil: none),
// so that a runner returns it at once rather than retrying each term.
func termOptionsErr(option string, opts []SessionOption) error {
	o := termOptions(opts)
	if _, err := o.check(); err != nil {
		return fmt.Errorf("%s: %w", option, err)
	}
	return nil
}
