package slowwrite

import (
	"context"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// TestWaitBesideChainedWrites: writes that each start when the last is
// answered (a cleanup set off by an answer) while Wait is called again and
// again; Wait must neither panic nor return with a write held back once
// the chain has ended. The invoker stands for the connection: what is
// tested is the holding back, not etcd.
func TestWaitBesideChainedWrites(t *testing.T) {
	sw := New()
	sw.Set(time.Millisecond)
	answer := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	const writes = 200
	chain := make(chan struct{})
	go func() {
		defer close(chain)
		for range writes {
			if err := sw.intercept(context.Background(), "/etcdserverpb.KV/Put", &pb.PutRequest{}, nil, nil, answer); err != nil {
				t.Errorf("held-back write: %v", err)
			}
		}
	}()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-chain:
					return
				default:
					sw.Wait()
				}
			}
		}()
	}
	<-chain
	wg.Wait()
	sw.Wait()
	sw.mu.Lock()
	held := sw.held
	sw.mu.Unlock()
	if held != 0 || sw.Slowed() != writes {
		t.Fatalf("after the chain: %d held back, %d slowed; want 0 and %d", held, sw.Slowed(), writes)
	}
}
