package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errNotInQueue is the error of force-unlock with a key that is not in the
// lock's queue.
var errNotInQueue = errors.New("not in the lock's queue")

func newForceUnlockCommand(conn *connFlags) *cobra.Command {
	var key string
	var rev int64
	cmd := &cobra.Command{
		Use:   "force-unlock NAME --key KEY [--rev REV]",
		Short: "Delete a stuck key from a lock's queue",
		Long: `Delete the key KEY, exactly as 'etcdlock inspect NAME' shows it, from the
queue of lock NAME. If it was the holder's key, the next waiter gets the lock;
a holder run by 'etcdlock lock' notices at once and stops its command (exit
122), a holder using etcd's concurrency package or etcdctl does not notice.
The holder's lease is left alone.

With --rev, the key is deleted only if its create revision is REV, so that a
key deleted and written again since inspect (a new hold by the same session)
is not removed.

A KEY that is not in NAME's queue (another lock's key, a key already gone, a
mistyped key) or a REV that does not match changes nothing, and exits 125.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			switch {
			case name == "":
				return usagef("force-unlock NAME must not be empty")
			case key == "":
				return usagef("force-unlock needs --key KEY, as 'etcdlock inspect %s' shows it", name)
			case rev < 0:
				return usagef("--rev must be positive, not %d", rev)
			case !strings.HasPrefix(key, lockPrefix(name)) || key == lockPrefix(name):
				return withCode(exitNotFound, fmt.Errorf("key %q is %w %q (its keys begin with %q); nothing changed",
					key, errNotInQueue, name, lockPrefix(name)))
			}
			ctx, stop := withSignals()
			defer stop()
			cli, err := conn.connect(ctx, lockPrefix(name))
			if err != nil {
				return orInterrupted(ctx, "", err)
			}
			defer cli.Close()

			cmp := clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
			if rev > 0 {
				cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", rev)
			}
			rctx, cancel := conn.requestCtx(ctx)
			defer cancel()
			// The holder is read in the same transaction, before the delete.
			resp, err := cli.Txn(rctx).If(cmp).
				Then(clientv3.OpGet(lockPrefix(name), clientv3.WithFirstCreate()...), clientv3.OpDelete(key, clientv3.WithPrevKV())).
				Else(clientv3.OpGet(key)).
				Commit()
			if err != nil {
				return orInterrupted(ctx, "", fmt.Errorf("deleting %q: %w", key, err))
			}
			if !resp.Succeeded {
				if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
					return withCode(exitNotFound, fmt.Errorf("key %q has create revision %d, not --rev %d: it was written again since; nothing changed",
						key, kvs[0].CreateRevision, rev))
				}
				return withCode(exitNotFound, fmt.Errorf("key %q is %w %q: it does not exist (any more); nothing changed",
					key, errNotInQueue, name))
			}
			prev := resp.Responses[1].GetResponseDeleteRange().PrevKvs[0]
			role := "a waiter"
			if first := resp.Responses[0].GetResponseRange().Kvs; len(first) > 0 && string(first[0].Key) == key {
				role = "the holder"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s (%s; lease %x, create revision %d) at revision %d\n",
				key, role, prev.Lease, prev.CreateRevision, resp.Header.Revision)
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the key to delete, exactly as inspect shows it")
	cmd.Flags().Int64Var(&rev, "rev", 0, "delete only if the key's create revision is this")
	return cmd
}
