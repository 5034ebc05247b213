// Command observe is a service written against etcd 3.5's and 3.6's
// Election.Observe, whose channel carries clientv3.GetResponse values, and
// which passes that channel to a function typed for it. compat/observe.sh
// builds it against etcd's package of those lines, with only the import
// path swapped to this module (which must fail, on the line of follow's
// signature), and with the one-line change doc.go gives (which must build
// and run). It lives in testdata so that no module of the repository
// compiles it.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func main() {
	if err := run(strings.Split(os.Getenv("ETCD_ENDPOINTS"), ",")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("observe: ok")
}

// follow receives leader values from ch until one equals want, and
// returns the revision at which it was the leader's value.
func follow(ch <-chan clientv3.GetResponse, want string) (int64, error) {
	for resp := range ch {
		if string(resp.Kvs[0].Value) == want {
			return resp.Header.Revision, nil
		}
	}
	return 0, errors.New("observe: channel closed before " + want)
}

// run campaigns with one value and proclaims another while an observer on a
// second session follows the election until it sees the second.
func run(endpoints []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		return err
	}
	defer s.Close()
	obs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		return err
	}
	defer obs.Close()

	const name = "/svc/observe"
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	ch := concurrency.NewElection(obs, name).Observe(octx)
	type result struct {
		rev int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Observe may skip "first" if "second" replaced it before it read.
		rev, err := follow(ch, "second")
		done <- result{rev, err}
	}()

	e := concurrency.NewElection(s, name)
	if err := e.Campaign(ctx, "first"); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	if err := e.Proclaim(ctx, "second"); err != nil {
		return fmt.Errorf("proclaim: %w", err)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return fmt.Errorf("observe: %w", ctx.Err())
	}
	if r.err != nil {
		return r.err
	}
	l, err := e.Leader(ctx)
	if err != nil {
		return fmt.Errorf("leader: %w", err)
	}
	if r.rev < l.Kvs[0].ModRevision {
		return fmt.Errorf("observed %q at revision %d, before it was written at %d", "second", r.rev, l.Kvs[0].ModRevision)
	}
	ocancel()
	for range ch {
	}
	return e.Resign(ctx)
}
