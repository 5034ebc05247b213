package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// shardsOptions are the flags of `etcdlock shards`.
type shardsOptions struct {
	ttl       int
	weight    int
	killGrace time.Duration
	signal    signalValue
	fg        bool
	list      bool
	quiet     bool
}

func newShardsCommand(conn *connFlags) *cobra.Command {
	o := &shardsOptions{}
	cmd := &cobra.Command{
		Use:   "shards [flags] GROUP N -- COMMAND [ARGS...]",
		Short: "Run a command for each shard of a group this process owns, or list a group's members and owners",
		Long: `Join the group GROUP of N shards (concurrency.Shards) and run COMMAND once
for each shard this process owns, while it owns it. The shards of a group
are spread over the processes running 'etcdlock shards' on it, by weight
(--weight): each owns within one of its fair share. A process that joins
asks the others to hand over its share; one that ends (SIGINT, SIGTERM,
SIGHUP) stops its commands and hands its shards over at once; one that
crashes loses its shards after --ttl. Each shard is a lock named
GROUP/shard/<i>, held by one process at a time.

Each command gets stdin, stdout and stderr passed through and these
variables:
  ETCDLOCK_SHARD      the shard's number, from 0 to N-1
  ETCDLOCK_SHARDS     N
  ETCDLOCK_SHARD_KEY  the shard's lock key, GROUP/shard/<i>/<lease ID in hex>
  ETCDLOCK_SHARD_REV  the fencing token: the key's create revision, which is
                      larger for every later owner of the shard
When the shard is handed over or lost, its command's process group is sent
SIGTERM (or --signal), then SIGKILL after --kill-grace, as for 'etcdlock
elect'; the shard is released once the command has exited. A command that
exits 0 by itself keeps its shard, idle, until it is handed over; one that
exits otherwise makes etcdlock leave the group (stopping the other
commands) and exit with its status. A signal stops every command and
etcdlock exits 0 once all have exited and the shards are released.

With --list, print the group's members (lease, weight, share, owned shards)
and each shard's owner, and exit.`,
		Example: `  # run one consumer per partition, spread over the hosts that run this
  etcdlock shards --ttl 10 consumers 16 -- /usr/local/bin/consume --partition '$ETCDLOCK_SHARD'

  # who owns what
  etcdlock shards --list consumers 16`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case o.list && dash < 0 && len(args) == 2:
				return nil
			case !o.list && dash == 2 && len(args) > 2:
				return nil
			}
			return usagef("shards GROUP N -- COMMAND, or shards --list GROUP N")
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.quiet = conn.quiet
			group := args[0]
			n, err := strconv.Atoi(args[1])
			switch {
			case group == "":
				return usagef("shards GROUP must not be empty: %w", concurrency.ErrInvalidPrefix)
			case err != nil || n <= 0 || n > concurrency.MaxShardCount:
				return usagef("shards N %q (1 to %d): %w", args[1], concurrency.MaxShardCount, concurrency.ErrInvalidShardCount)
			case o.ttl <= 0:
				return withCode(exitUsage, fmt.Errorf("--ttl %d: %w", o.ttl, concurrency.ErrInvalidTTL))
			case o.weight <= 0 || o.weight > concurrency.MaxShardWeight:
				return withCode(exitUsage, fmt.Errorf("--weight %d (1 to %d): %w", o.weight, concurrency.MaxShardWeight, concurrency.ErrInvalidShardWeight))
			case o.killGrace < 0:
				return usagef("--kill-grace must not be negative, not %v", o.killGrace)
			}
			var command []string
			if !o.list {
				command = args[2:]
				if err := checkCommand(command[0]); err != nil {
					return err
				}
			}
			ctx, stop := withSignals()
			defer stop()
			cli, err := conn.connect(ctx, lockPrefix(group))
			if err != nil {
				return orInterrupted(ctx, "", err)
			}
			defer cli.Close()
			if o.list {
				return o.listGroup(ctx, conn, cli, group, n, cmd.OutOrStdout())
			}
			return o.run(ctx, cli, group, n, command, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.ttl, "ttl", 10, "TTL of the session's lease in seconds: how long the shards of a crashed process stay with it")
	f.IntVar(&o.weight, "weight", 1, "this process's weight, 1 to 65536: its share of the shards is N times its weight over the sum of the members' weights")
	durationVar(f, &o.killGrace, "kill-grace", 10*time.Second, "after a shard is handed over or lost, time between --signal and SIGKILL to its command's process group; 0 sends SIGKILL at once")
	o.signal = signalValue(syscall.SIGTERM)
	f.VarP(&o.signal, "signal", "s", "after a shard is handed over or lost, send this signal (a name such as TERM, HUP, INT, USR1, or a number) to its command's process group, then SIGKILL after --kill-grace")
	f.BoolVar(&o.fg, "foreground", false, foregroundUsage)
	f.BoolVar(&o.list, "list", false, "print the group's members and each shard's owner, and exit")
	cmd.RegisterFlagCompletionFunc("signal", completeSignal)
	return cmd
}

// run joins the group and supervises one command per owned shard until a
// signal (which ends ctx), or a command that fails.
func (o *shardsOptions) run(ctx context.Context, cli *clientv3.Client, group string, n int, command []string, stdout, stderr io.Writer) error {
	// out serialises etcdlock's own lines; the commands write where they
	// like.
	var out sync.Mutex
	say := func(format string, args ...any) {
		if o.quiet {
			return
		}
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(stderr, "etcdlock: "+format+"\n", args...)
	}
	fn := func(sctx context.Context, sh concurrency.Shard) error {
		key := sh.Key()
		say("owns shard %d of %q as %s (revision %d); running %s", sh.ID(), group, key, sh.Token(), command[0])
		sup := supervised{
			command: command,
			env: []string{"ETCDLOCK_SHARD=" + strconv.Itoa(sh.ID()), "ETCDLOCK_SHARDS=" + strconv.Itoa(n),
				"ETCDLOCK_SHARD_KEY=" + key, "ETCDLOCK_SHARD_REV=" + strconv.FormatInt(sh.Token(), 10)},
			killGrace:  o.killGrace,
			stopSignal: syscall.Signal(o.signal),
			foreground: o.fg,
			what:       fmt.Sprintf("shard %d of %q", sh.ID(), group),
		}
		// Signals end ctx, and so every shard's context: none is passed
		// on to the commands directly.
		_, err := sup.run(sctx, nil, stdout, stderr)
		if sctx.Err() != nil {
			if ctx.Err() == nil {
				say("%s of shard %d exited after the shard was handed over or lost (%v)", command[0], sh.ID(), context.Cause(sctx))
			}
			return nil
		}
		if err != nil {
			say("%s of shard %d failed (%v); leaving %q", command[0], sh.ID(), err, group)
			return fmt.Errorf("shard %d: %w", sh.ID(), exitStatus(err))
		}
		say("%s of shard %d exited 0; keeping the shard until it is handed over", command[0], sh.ID())
		return nil
	}
	say("joining %q (%d shards, weight %d)", group, n, o.weight)
	err := concurrency.Shards(ctx, cli, group, n, fn, concurrency.WithShardTTL(o.ttl), concurrency.WithShardWeight(o.weight),
		concurrency.WithShardOwner(owner("shards", command)))
	var se signalError
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &se) {
		// A signal: every command was stopped and the shards handed over.
		if errors.Is(err, ctx.Err()) {
			return nil
		}
		return err
	}
	if ce := (*codedError)(nil); errors.As(err, &ce) {
		return ce // a command's status, or why it did not start
	}
	return err
}

// listGroup prints the group's members and each shard's owner.
func (o *shardsOptions) listGroup(ctx context.Context, conn *connFlags, cli *clientv3.Client, group string, n int, stdout io.Writer) error {
	rctx, cancel := conn.requestCtx(ctx)
	defer cancel()
	g, err := concurrency.InspectShards(rctx, cli, group, n)
	if err != nil {
		return orInterrupted(ctx, "", err)
	}
	fmt.Fprintf(stdout, "group %q, %d shards, %d members, revision %d\n", group, n, len(g.Members), g.Revision)
	for _, m := range g.Members {
		who := ""
		if m.Owner != nil {
			who = " " + m.Owner.String()
		}
		fmt.Fprintf(stdout, "member %x weight %d share %d owns %d %v%s\n", int64(m.Lease), m.Weight, m.Share, len(m.Owned), m.Owned, who)
	}
	var unowned []string
	for _, sh := range g.Shards {
		if !sh.Member {
			unowned = append(unowned, strconv.Itoa(sh.ID))
		}
	}
	if len(unowned) > 0 {
		fmt.Fprintf(stdout, "without a member owner: %s\n", strings.Join(unowned, " "))
	}
	return nil
}
