package main

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// Candidates are elected in turn; an observer prints each leader's
// proposal; SIGINT resigns; a lost leadership exits 122.
func TestElect(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)

	observer := start(t, nil, "elect", "--listen", pfx)
	first := start(t, nil, "elect", pfx, "one")
	key1 := first.firstLine()
	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	if key1 != string(kvs[0].Key) || string(kvs[0].Value) != "one" {
		t.Fatalf("leader printed %q; etcd has %s = %q", key1, kvs[0].Key, kvs[0].Value)
	}
	observer.waitFor(observer.stdout, "one\n")

	second := start(t, nil, "elect", pfx, "two")
	kvs = etcdtest.WaitKeys(t, c, pfx, 2)
	if out := second.stdout.String(); out != "" {
		t.Fatalf("second candidate elected while the first leads: %q", out)
	}
	first.release()
	if key2 := second.firstLine(); key2 != string(kvs[1].Key) {
		t.Fatalf("second leader printed %q, want its key %s", key2, kvs[1].Key)
	}
	observer.waitFor(observer.stdout, "one\ntwo\n")

	if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[1].Lease)); err != nil {
		t.Fatal(err)
	}
	second.expectExit(10*time.Second, exitLost)
	observer.release()
	if out := observer.stdout.String(); out != "one\ntwo\n" {
		t.Errorf("observer printed %q, want one, two", out)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}
