package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// This file holds 'etcdlock work': the operators' side of a
// recipes.WorkQueue. It is named "work", not "queue", because queue.go and
// 'etcdlock inspect' already speak of a lock's queue of waiters (issue 53).

// workOptions are the flags of 'etcdlock work' and its subcommands.
type workOptions struct {
	maxDeliveries int
	// put
	priority uint16
	delay    time.Duration
	dedup    string
	// take
	ttl        int
	once       bool
	retryDelay time.Duration
	killGrace  time.Duration
	limit      int64 // list, dead
}

func newWorkCommand(conn *connFlags) *cobra.Command {
	o := &workOptions{}
	cmd := &cobra.Command{
		Use:   "work",
		Short: "Put, take, list and repair the items of a work queue (recipes.WorkQueue)",
		Long: `Work with the work queue NAME, a recipes.WorkQueue: items are taken by a
claim on the taker's session, acknowledged when done, and delivered again if
the taker dies first. 'etcdlock work take' runs a command for each item and
acknowledges the item when the command exits 0.`,
		Example: `  # add a job, and run workers that each run a script per job
  etcdlock work put jobs '{"resize": "a.png"}'
  etcdlock work take jobs -- sh -c 'process < "$ETCDLOCK_ITEM_FILE"'

  # what is queued, in flight, delayed, dead
  etcdlock work stats jobs
  etcdlock work dead jobs
  etcdlock work requeue jobs ID`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("work needs a subcommand: put, take, list, stats, dead, requeue or purge")
		},
	}
	cmd.PersistentFlags().IntVar(&o.maxDeliveries, "max-deliveries", 0, "move an item to the dead letters after this many deliveries (0: no limit); every process of one queue should use the same")
	for _, sub := range []*cobra.Command{o.putCommand(conn), o.takeCommand(conn), o.listCommand(conn, false), o.listCommand(conn, true),
		o.statsCommand(conn), o.deadCommand(conn, "requeue"), o.deadCommand(conn, "purge")} {
		cmd.AddCommand(sub)
	}
	return cmd
}

// open connects and returns the queue NAME.
func (o *workOptions) open(ctx context.Context, conn *connFlags, name string) (*clientv3.Client, *recipes.WorkQueue, error) {
	var opts []recipes.WorkQueueOption
	if o.maxDeliveries != 0 {
		opts = append(opts, recipes.WithMaxDeliveries(o.maxDeliveries))
	}
	if name == "" {
		return nil, nil, usagef("work NAME must not be empty: %w", recipes.ErrInvalidName)
	}
	cli, err := conn.connect(ctx, name+"/")
	if err != nil {
		return nil, nil, orInterrupted(ctx, "", err)
	}
	q, err := recipes.NewWorkQueue(cli, name, opts...)
	if err != nil {
		cli.Close()
		return nil, nil, withCode(exitUsage, err)
	}
	return cli, q, nil
}

// onQueue runs fn on the queue NAME, with a context that a signal ends
// and one request's context (bounded by --command-timeout), and returns
// its error, or the signal's.
func (o *workOptions) onQueue(conn *connFlags, name string, fn func(ctx, rctx context.Context, q *recipes.WorkQueue) error) error {
	ctx, stop := withSignals()
	defer stop()
	cli, q, err := o.open(ctx, conn, name)
	if err != nil {
		return err
	}
	defer cli.Close()
	rctx, cancel := conn.requestCtx(ctx)
	defer cancel()
	return orInterrupted(ctx, "", fn(ctx, rctx, q))
}

func (o *workOptions) putCommand(conn *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "put NAME VALUE",
		Short: "Add an item; VALUE - reads it from stdin. Prints the item's id",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			val := args[1]
			if val == "-" {
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return err
				}
				val = string(b)
			}
			opts := []recipes.PutOption{recipes.WithPriority(o.priority), recipes.WithDelay(o.delay)}
			if o.dedup != "" {
				opts = append(opts, recipes.WithDedupID(o.dedup))
			}
			return o.onQueue(conn, args[0], func(_, rctx context.Context, q *recipes.WorkQueue) error {
				id, err := q.Put(rctx, val, opts...)
				switch {
				case errors.Is(err, recipes.ErrDuplicate):
					fmt.Fprintln(cmd.OutOrStdout(), id)
					return withCode(exitBusy, err)
				case errors.Is(err, recipes.ErrInvalidDelay) || errors.Is(err, recipes.ErrItemTooLarge) || errors.Is(err, recipes.ErrInvalidName):
					return withCode(exitUsage, err)
				case err != nil:
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.Uint16Var(&o.priority, "priority", 0, "priority: lower numbers are taken first")
	durationVar(f, &o.delay, "delay", 0, "make the item ready only after this long, by the clients' clocks")
	f.StringVar(&o.dedup, "dedup", "", "deduplication id: if an item with this id is in the queue, add nothing, print its id and exit 123")
	return cmd
}

func (o *workOptions) takeCommand(conn *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "take NAME -- COMMAND [ARGS...]",
		Short: "Take items one at a time and run COMMAND for each; acknowledge it when COMMAND exits 0",
		Long: `Take the items of NAME one at a time, on a session with --ttl, and run
COMMAND for each, with these variables:
  ETCDLOCK_ITEM_ID     the item's id
  ETCDLOCK_ITEM_FILE   a file holding the item's value (deleted afterwards)
  ETCDLOCK_ITEM        the value, if under 64 KiB
  ETCDLOCK_DELIVERY    1 for the first delivery, more after failures or crashes
  ETCDLOCK_ITEM_TOKEN  the claim's revision: a fencing token
When COMMAND exits 0 the item is acknowledged (deleted); otherwise it is given
back, to be delivered again after --retry-delay (or moved to the dead letters
past --max-deliveries). If the claim is lost (the session ended), COMMAND's
process group is sent SIGTERM, then SIGKILL after --kill-grace, and the item
goes to another taker. Without --once it runs until SIGINT or SIGTERM; with
--once it takes one item, waiting for it, and exits with COMMAND's status.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return usagef("work take NAME -- COMMAND [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.ttl <= 0 || o.retryDelay < 0 {
				return usagef("--ttl must be positive and --retry-delay not negative")
			}
			if err := checkCommand(args[1]); err != nil {
				return err
			}
			ctx, stop := withSignals()
			defer stop()
			cli, q, err := o.open(ctx, conn, args[0])
			if err != nil {
				return err
			}
			defer cli.Close()
			return o.take(ctx, conn, cli, q, args[1:], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.ttl, "ttl", 10, "TTL of the session's lease in seconds: how long the items of a crashed taker stay claimed")
	f.BoolVar(&o.once, "once", false, "take one item, run COMMAND, and exit with its status")
	durationVar(f, &o.retryDelay, "retry-delay", time.Second, "after COMMAND fails, deliver the item again after this long")
	durationVar(f, &o.killGrace, "kill-grace", 10*time.Second, "after a lost claim, time between SIGTERM and SIGKILL to COMMAND's process group")
	return cmd
}

// take runs the take loop: one session for all items, a new one if it
// ends.
func (o *workOptions) take(ctx context.Context, conn *connFlags, cli *clientv3.Client, q *recipes.WorkQueue, command []string, stdout, stderr io.Writer) error {
	for {
		s, closeSession, err := startSession(ctx, conn, cli, o.ttl)
		if err != nil {
			return orInterrupted(ctx, "", err)
		}
		err = o.takeOn(ctx, q, s, command, stdout, stderr)
		closeSession(conn.commandTimeout)
		if ctx.Err() != nil {
			return nil // a signal: the session's revoke gave back what it held
		}
		if err != nil || o.once {
			return err
		}
	}
}

// takeOn takes and runs items until session s ends, ctx ends, or --once
// has run one.
func (o *workOptions) takeOn(ctx context.Context, q *recipes.WorkQueue, s *concurrency.Session, command []string, stdout, stderr io.Writer) error {
	for s.Ctx().Err() == nil {
		d, err := q.Take(ctx, s)
		if err != nil {
			if ctx.Err() != nil || s.Ctx().Err() != nil {
				return nil
			}
			return err
		}
		status := o.runItem(d, command, stdout, stderr)
		// The ack or nack must not be cut short by a signal that came
		// while the command ran: the command is done.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if status == nil {
			err = d.Ack(ectx)
		} else {
			err = d.Nack(ectx, o.retryDelay)
		}
		cancel()
		if err != nil && !errors.Is(err, recipes.ErrClaimLost) {
			if o.once {
				return err
			}
			// Likely passing (a lost leader, a timeout): not a reason to
			// stop taking. The session ends here, and with its lease the
			// claim, so the item is not stranded on a live session; take
			// starts another.
			fmt.Fprintf(stderr, "etcdlock: item %s: %v; giving back what this session holds and taking on a new one\n", d.ID(), err)
			return nil
		}
		if errors.Is(err, recipes.ErrClaimLost) {
			fmt.Fprintf(stderr, "etcdlock: item %s: %v; it is delivered again\n", d.ID(), err)
		}
		if o.once {
			if status == nil && err != nil {
				return withCode(exitLost, err)
			}
			return status
		}
	}
	return nil
}

// runItem runs command for delivery d, supervised by its claim, and
// returns its status (nil for 0).
func (o *workOptions) runItem(d *recipes.Delivery, command []string, stdout, stderr io.Writer) error {
	f, err := os.CreateTemp("", "etcdlock-item-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(d.Value())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	env := []string{"ETCDLOCK_ITEM_ID=" + d.ID(), "ETCDLOCK_ITEM_FILE=" + f.Name(),
		"ETCDLOCK_DELIVERY=" + strconv.Itoa(d.Count()), "ETCDLOCK_ITEM_TOKEN=" + strconv.FormatInt(d.Token(), 10)}
	if len(d.Value()) < 64<<10 {
		env = append(env, "ETCDLOCK_ITEM="+d.Value())
	}
	sup := supervised{command: command, env: env, killGrace: o.killGrace, stopSignal: syscall.SIGTERM,
		what: fmt.Sprintf("item %s of %q", d.ID(), "work queue")}
	_, err = sup.run(d.Ctx(), nil, stdout, stderr)
	return exitStatus(err)
}

func (o *workOptions) listCommand(conn *connFlags, dead bool) *cobra.Command {
	use, short := "list NAME", "List the items: id, state, priority, deliveries, put time, value"
	if dead {
		use, short = "dead NAME", "List the dead letters: id, priority, deliveries, put time, value"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.onQueue(conn, args[0], func(_, rctx context.Context, q *recipes.WorkQueue) error {
				list := q.Items
				if dead {
					list = q.DeadLetters
				}
				items, err := list(rctx, o.limit)
				if err != nil {
					return err
				}
				for _, it := range items {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\tpriority %d\tdeliveries %d\tput %s\t%q\n", it.ID, it.State, it.Priority,
						it.Deliveries, it.PutTime.UTC().Format(time.RFC3339), oneLine(it.Value))
				}
				return nil
			})
		},
	}
	cmd.Flags().Int64Var(&o.limit, "limit", 100, "list at most this many (0: all)")
	return cmd
}

func (o *workOptions) statsCommand(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "stats NAME",
		Short: "Count the items ready, in flight, delayed and dead, and the oldest's age",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.onQueue(conn, args[0], func(_, rctx context.Context, q *recipes.WorkQueue) error {
				st, err := q.Stats(rctx)
				if err != nil {
					return err
				}
				age := "none"
				if !st.Oldest.IsZero() {
					age = time.Since(st.Oldest).Round(time.Millisecond).String()
				}
				fmt.Fprintf(cmd.OutOrStdout(), "ready %d\nin flight %d\ndelayed %d\ndead %d\noldest age %s\nrevision %d\n",
					st.Ready, st.InFlight, st.Delayed, st.Dead, age, st.Revision)
				return nil
			})
		},
	}
}

// deadCommand is 'work requeue' or 'work purge' of dead letters.
func (o *workOptions) deadCommand(conn *connFlags, verb string) *cobra.Command {
	short := "Make dead letters ready again, with their delivery count started again"
	if verb == "purge" {
		short = "Delete dead letters"
	}
	var all bool
	cmd := &cobra.Command{
		Use:   verb + " NAME [ID...]",
		Short: short + " (--all: every one); a missing ID exits 125",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 1) {
				return usagef("work %s NAME needs IDs or --all, not both", verb)
			}
			return o.onQueue(conn, args[0], func(ctx, _ context.Context, q *recipes.WorkQueue) error {
				ids := args[1:]
				if all {
					dead, err := q.DeadLetters(ctx, 0)
					if err != nil {
						return err
					}
					for _, d := range dead {
						ids = append(ids, d.ID)
					}
				}
				do := q.Requeue
				if verb == "purge" {
					do = q.Purge
				}
				for _, id := range ids {
					rctx, cancel := conn.requestCtx(ctx)
					err := do(rctx, id)
					cancel()
					if errors.Is(err, recipes.ErrNotFound) {
						return withCode(exitNotFound, err)
					}
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", verb+"d", id)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every dead letter")
	return cmd
}
