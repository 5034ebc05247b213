package request

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Only failures that a later attempt may not meet are transient.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), false},
		{ErrNoAnswer, true},
		{fmt.Errorf("stream: %w", ErrNoAnswer), true},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrLeaderChanged, true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrTooManyRequests, true},
		{status.Error(codes.Unavailable, "connection reset"), true},
		{rpctypes.ErrLeaseNotFound, false},
		{rpctypes.ErrCompacted, false},
		{rpctypes.ErrPermissionDenied, false},
		{errors.New("other"), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// RPCErr turns etcd's gRPC errors into clientv3's values, and gives ctx's
// error once ctx ended.
func TestRPCErr(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := RPCErr(ctx, nil); err != nil {
		t.Fatalf("RPCErr(nil) = %v", err)
	}
	if err := RPCErr(ctx, rpctypes.ErrGRPCLeaseNotFound); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("RPCErr(the gRPC lease-not-found) = %v, want rpctypes.ErrLeaseNotFound", err)
	}
	cancel()
	if err := RPCErr(ctx, rpctypes.ErrGRPCLeaseNotFound); !errors.Is(err, context.Canceled) {
		t.Fatalf("RPCErr after ctx ended = %v, want context.Canceled", err)
	}
}
