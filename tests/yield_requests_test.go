package concurrency_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// A session WithYield that locks many names, each asked to yield once and
// released: the requests' keys are left on the session's lease until the
// session ends, one per name.
func TestYieldKeysLeftAfterUnlock(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithYield())
	const names = 5
	for i := 0; i < names; i++ {
		name := pfx + "/n" + string(rune('a'+i))
		m := concurrency.NewMutex(s, name)
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		hctx := m.Ctx()
		if _, err := concurrency.RequestYield(t.Context(), c, name); err != nil {
			t.Fatal(err)
		}
		select {
		case <-hctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("hold not ended 10 s after RequestYield")
		}
		if err := m.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Get(t.Context(), concurrency.YieldPrefix+pfx, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		var ks []string
		for _, kv := range resp.Kvs {
			ks = append(ks, string(kv.Key))
		}
		t.Errorf("%d yield request keys left after every hold was released, session alive: %v", len(resp.Kvs), ks)
	}
}

// RequestYield races a release and a new grant of the same key (the same
// session locking the name again, so the same key with a new token): a
// new hold ends with ErrYieldRequested only if a request names its own
// token; a stale request, for the hold before, never cancels it.
func TestYieldRacesRegrant(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithYield())
	m := concurrency.NewMutex(s, pfx)
	stale := 0
	for i := 0; i < 15; i++ {
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = m.Ctx()
		reqc := make(chan error, 1)
		go func() {
			_, err := concurrency.RequestYield(t.Context(), c, pfx)
			reqc <- err
		}()
		if err := m.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		hctx, tok := m.Ctx(), m.Token()
		if err := <-reqc; err != nil && !errors.Is(err, concurrency.ErrNotHeld) {
			t.Logf("RequestYield: %v", err)
		}
		resp, err := c.Get(t.Context(), concurrency.YieldPrefix+m.Key())
		if err != nil {
			t.Fatal(err)
		}
		asksThis := len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == strconv.FormatInt(tok, 10)
		if asksThis {
			select {
			case <-hctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("hold asked by its own token still runs 10 s later")
			}
		} else {
			stale++
			// Bounded wait for a wrongful cancel: the watch answers
			// within milliseconds; a request naming another token must not.
			select {
			case <-hctx.Done():
				t.Fatalf("round %d: hold with token %d ended by %v; the yield key is %v", i, tok, context.Cause(hctx), resp.Kvs)
			case <-time.After(300 * time.Millisecond):
			}
		}
		if err := m.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of 15 rounds had no request for the new hold", stale)
}
