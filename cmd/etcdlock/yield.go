package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/seed-a9d410c6/concurrency"
)

func newYieldCommand(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "yield NAME",
		Short: "Ask the holders of a lock or election to let go",
		Long: `Ask the current holders of the lock or election NAME to let go (Curator's
revocable locks, Kubernetes' coordinated leader election): the holder of a
mutex, the leader of an election, every holder of a semaphore or
reader/writer lock. It writes one request key per holder, under
` + concurrency.YieldPrefix + `, attached to the holder's lease, and prints each
holder asked.

Only holders that opted in let go: 'etcdlock lock --yield' stops its command
as on a loss (exit 122), 'etcdlock elect --yield' stops its command and
campaigns again behind the other candidates, and a library user with a
session created WithYield sees its hold's context end with
ErrYieldRequested. Other holders (without the option, etcd's package,
etcdctl lock) keep the lock; inspect shows that they were asked.

Exits 0 once the requests are written, 125 if nobody holds NAME.`,
		Example: `  # let another host take over the nightly report
  etcdlock yield nightly-report`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if name == "" {
				return usagef("yield NAME must not be empty")
			}
			ctx, stop := withSignals()
			defer stop()
			cli, err := conn.connect(ctx, lockPrefix(name))
			if err != nil {
				return orInterrupted(ctx, "", err)
			}
			defer cli.Close()
			rctx, cancel := conn.requestCtx(ctx)
			defer cancel()
			asked, err := concurrency.RequestYield(rctx, cli, name)
			switch {
			case errors.Is(err, concurrency.ErrNotHeld):
				return withCode(exitNotFound, fmt.Errorf("nobody holds %q: nothing to ask", name))
			case err != nil:
				return orInterrupted(ctx, "", err)
			}
			for _, h := range asked {
				fmt.Fprintf(cmd.OutOrStdout(), "asked %s (lease %x, token %d) to yield\n", h.Key, int64(h.Lease), h.CreateRevision)
			}
			return nil
		},
	}
}
