// Command worker is one client process of the comparison's fault runs: it
// runs the guarded-counter and the external-resource workloads with one
// lock system against the store of the run (package compare), for a fixed
// time or number of acquisitions, so that the harness can pause it with
// SIGSTOP and cut it off from the servers with a proxy.
//
// Each workload is one goroutine with its own lock client (its own etcd
// session or ZooKeeper session): acquire, first operation, -work of
// "work", second operation, release. With -fenced it passes the system's
// fencing token to the store (this module: Mutex.Token; ZooKeeper: the lock
// node's czxid), and this module's counter lives in etcd and is written
// with the guarded Mutex.Txn. It prints one line of counts and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/compare"
)

var (
	system   = flag.String("system", "", "lock system: "+strings.Join(compare.Systems, ", "))
	addrs    = flag.String("addrs", "", "comma-separated host:port of the servers (or their proxies)")
	store    = flag.String("store", "", "base URL of the run's store")
	name     = flag.String("name", "w0", "client name")
	ttl      = flag.Duration("ttl", 2*time.Second, "lock TTL, lease or session timeout")
	retry    = flag.Duration("retry", 5*time.Millisecond, "Redis retry interval")
	fenced   = flag.Bool("fenced", false, "use the system's fencing token (and, for this module, the guarded Txn)")
	duration = flag.Duration("duration", 10*time.Second, "how long to run")
	maxAcq   = flag.Int("max", 2000, "most acquisitions per workload")
	work     = flag.Duration("work", 20*time.Millisecond, "time between a hold's two operations")
	lockPfx  = flag.String("lockpfx", "", "prefix of the lock names, unique per run")
)

// CounterKey is the etcd key of this module's guarded counter.
const CounterKey = "/compare-data/ctr"

func main() {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	c, err := compare.Dial(compare.Config{System: *system, Addrs: strings.Split(*addrs, ","), TTL: *ttl,
		Retry: *retry, Token: *fenced})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := &worker{c: c, http: &http.Client{Timeout: 5 * time.Second}}
	var wg sync.WaitGroup
	for _, wl := range []string{"ctr", "res"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, wl)
		}()
	}
	wg.Wait()
	fmt.Printf("acquired=%d acquire_errors=%d release_errors=%d\n", w.acq.Load(), w.acqErr.Load(), w.relErr.Load())
	// Closing may block on servers that are down; the harness kills a
	// worker that outlives its grace, so exit without waiting for it.
	go c.Close()
	time.Sleep(100 * time.Millisecond)
}

type worker struct {
	c                   *compare.Client
	http                *http.Client
	acq, acqErr, relErr atomic.Int64
}

func (w *worker) loop(ctx context.Context, wl string) {
	lk, err := w.c.NewLock(ctx, *lockPfx+wl)
	if err != nil {
		fmt.Fprintln(os.Stderr, wl, err)
		w.acqErr.Add(1)
		return
	}
	client := *name + "." + wl
	for n := 0; n < *maxAcq && ctx.Err() == nil; n++ {
		if err := lk.Acquire(ctx); err != nil {
			if ctx.Err() == nil {
				// A session that expired (etcd, ZooKeeper) stays
				// expired: start a new lock client, as an application
				// would.
				w.acqErr.Add(1)
				lk.Close()
				sleep(ctx, 50*time.Millisecond)
				if lk, err = w.c.NewLock(ctx, *lockPfx+wl); err != nil {
					fmt.Fprintln(os.Stderr, wl, err)
					return
				}
			}
			continue
		}
		w.acq.Add(1)
		var token int64
		if *fenced {
			token = lk.Token()
		}
		if wl == "ctr" {
			w.counter(lk, client, token)
		} else {
			if w.op("begin", client, token, 0) == nil {
				time.Sleep(*work)
				w.op("end", client, token, 0)
			}
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := lk.Release(rctx); err != nil {
			w.relErr.Add(1)
		}
		cancel()
	}
}

// counter reads the counter, waits -work, and writes it plus one.
func (w *worker) counter(lk compare.Lock, client string, token int64) {
	if tl, ok := lk.(*compare.ThisLock); ok && *fenced {
		w.op("hold", client, token, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cli := w.c.Etcd()
		resp, err := cli.Get(ctx, CounterKey)
		if err != nil {
			w.txn(client, false)
			return
		}
		var v int64
		if len(resp.Kvs) > 0 {
			v, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		}
		time.Sleep(*work)
		_, err = tl.M.Txn(ctx).Then(clientv3.OpPut(CounterKey, strconv.FormatInt(v+1, 10))).Commit()
		w.txn(client, err == nil)
		return
	}
	b, err := w.post("read", client, token, 0, "")
	if err != nil {
		return
	}
	v, err := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if err != nil {
		return
	}
	time.Sleep(*work)
	w.op("write", client, token, v)
}

func (w *worker) txn(client string, ok bool) {
	v := "0"
	if ok {
		v = "1"
	}
	w.post("txn", client, 0, 0, v)
}

func (w *worker) op(op, client string, token, read int64) error {
	_, err := w.post(op, client, token, read, "")
	return err
}

func (w *worker) post(op, client string, token, read int64, ok string) (string, error) {
	q := url.Values{"op": {op}, "c": {client}, "t": {strconv.FormatInt(token, 10)},
		"r": {strconv.FormatInt(read, 10)}, "ok": {ok}}
	resp, err := w.http.Post(*store+"/?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
