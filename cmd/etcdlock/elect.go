package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/seed-a9d410c6/concurrency"
)

type electOptions struct {
	listen bool
	ttl    int
	quiet  bool
}

func newElectCommand(conn *connFlags) *cobra.Command {
	o := &electOptions{}
	cmd := &cobra.Command{
		Use:   "elect [flags] NAME [PROPOSAL]",
		Short: "Campaign for leadership until a signal, or observe the leaders",
		Long: `With PROPOSAL, campaign in the election NAME with PROPOSAL as the value.
Once elected, print the leader key on stdout and stay leader until SIGINT or
SIGTERM, then resign and exit 0. If the leadership is lost (its key deleted,
its lease revoked or expired), exit 122.

With --listen and no PROPOSAL, print the proposal of each leader, one line
per new leader or proclaimed value, until SIGINT or SIGTERM (then exit 0).

Candidates are elected in the order they arrived, with the same keys as
etcdctl elect and etcd's concurrency package.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case args[0] == "":
				return usagef("elect NAME must not be empty: %w", concurrency.ErrInvalidPrefix)
			case o.listen && len(args) == 2:
				return usagef("elect --listen takes no PROPOSAL")
			case !o.listen && len(args) == 1:
				return usagef("elect needs a PROPOSAL, or --listen to observe")
			case o.ttl <= 0:
				return withCode(exitUsage, fmt.Errorf("--ttl %d: %w", o.ttl, concurrency.ErrInvalidTTL))
			}
			if o.listen {
				return o.observe(conn, args[0], cmd.OutOrStdout())
			}
			return o.campaign(conn, args[0], args[1], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.listen, "listen", "l", false, "observe the leaders instead of campaigning")
	f.IntVar(&o.ttl, "ttl", 10, "TTL of the session's lease in seconds: how long a leadership outlives a crashed leader")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no messages on stderr")
	return cmd
}

func (o *electOptions) campaign(conn *connFlags, name, proposal string, stdout, stderr io.Writer) error {
	waiting := fmt.Sprintf("while campaigning in %q", name)
	c, err := newContender(conn, name, o.ttl, waiting)
	if err != nil {
		return err
	}
	defer c.close()
	wctx := c.ctx

	e := concurrency.NewElection(c.s, name)
	if !o.quiet {
		fmt.Fprintf(stderr, "etcdlock: campaigning in %q with %q\n", name, oneLine(proposal))
	}
	err = e.Campaign(wctx, proposal)
	c.endWait()
	resign := func() {
		ctx, cancel := conn.requestCtx(context.Background())
		defer cancel()
		if err := e.Resign(ctx); err != nil {
			fmt.Fprintf(stderr, "etcdlock: resigning from %q: %v (the key goes with the session's lease)\n", name, err)
		}
	}
	switch {
	case err != nil && errors.Is(err, concurrency.ErrSessionExpired):
		return orInterrupted(wctx, waiting, withCode(exitLost, fmt.Errorf("campaigning in %q: %w", name, err)))
	case err != nil:
		return orInterrupted(wctx, waiting, fmt.Errorf("campaigning in %q: %w", name, err))
	case wctx.Err() != nil:
		resign()
		return interrupted(wctx, "just as the campaign was won")
	}

	hold := e.Ctx()
	fmt.Fprintln(stdout, e.Key())
	if !o.quiet {
		fmt.Fprintf(stderr, "etcdlock: leader of %q as %s (revision %d) until SIGINT or SIGTERM\n", name, e.Key(), e.Rev())
	}
	select {
	case <-c.sigc:
		resign()
		return nil
	case <-hold.Done():
		return withCode(exitLost, fmt.Errorf("lost the leadership of %q: %w", name, context.Cause(hold)))
	}
}

// observe prints the proposal of each leader of name until a signal.
func (o *electOptions) observe(conn *connFlags, name string, stdout io.Writer) error {
	ctx, stop := withSignals()
	defer stop()
	cli, err := conn.connect(ctx, lockPrefix(name))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer cli.Close()
	// An Election needs a Session; its lease carries no key here, and is
	// revoked when observing ends.
	s, closeSession, err := startSession(ctx, conn, cli, o.ttl)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer closeSession()
	for resp := range concurrency.NewElection(s, name).Observe(ctx) {
		fmt.Fprintln(stdout, string(resp.Kvs[0].Value))
	}
	return nil
}
