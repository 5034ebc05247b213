package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed-a9d410c6/concurrency"
)

type electOptions struct {
	listen    bool
	ttl       int
	quiet     bool
	once      bool
	killGrace time.Duration
	signal    signalValue // --signal: sent to the command's group when the leadership is lost
	metrics   string      // --metrics-addr
	fg        bool        // --foreground
	yield     bool        // --yield: let go when 'etcdlock yield' asks
	health    healthFlags // --health-cmd, --health-interval, --health-failures
}

func newElectCommand(conn *connFlags) *cobra.Command {
	o := &electOptions{}
	cmd := &cobra.Command{
		Use:   "elect [flags] NAME [PROPOSAL] [-- COMMAND [ARGS...]]",
		Short: "Campaign for leadership until a signal, run a command as the leader, or observe the leaders",
		Long: `With PROPOSAL, campaign in the election NAME with PROPOSAL as the value.
Once elected, print the leader key on stdout and stay leader until SIGINT or
SIGTERM, then resign and exit 0. If the leadership is lost (its key deleted,
its lease revoked or expired), exit 122.

With PROPOSAL and a command after "--", supervise the command: campaign, run
the command while leader, and campaign again after a loss. The command gets
stdin, stdout and stderr passed through and these variables:
  ETCD_ELECT_KEY  the leader key, NAME/<lease ID in hex>
  ETCD_ELECT_REV  the fencing token: the leader key's create revision, which
                  is larger for every later leader of NAME
If the leadership is lost while the command runs (its key deleted, its lease
revoked or expired, or etcd unreachable until the session's deadline), send
the command's process group SIGTERM (or --signal), then SIGKILL after
--kill-grace, wait
for the command and the rest of its group to exit (or for SIGKILL), and
campaign again on a new lease, after a backoff of 100 ms doubling to 5 s.
If the command exits by itself while leader, resign at once and exit with
its status. SIGINT, SIGTERM and SIGHUP are passed on to a running command's
process group, after which etcdlock resigns and exits with the command's
status once it exits; while campaigning, they end etcdlock with 128+N.
The process group, and --foreground, are as for 'etcdlock lock': see
'etcdlock lock --help'. With --once, run the
command at most once: if the leadership is lost, stop the command and exit
122 instead of campaigning again. Each run is on a new session. A command
whose leadership was lost may still be running, until it exits after
SIGTERM, when the next leader's command starts: where that matters, have
the resource refuse writes with an ETCD_ELECT_REV older than one it has
seen.

With --listen and no PROPOSAL, print the proposal of each leader, one line
per new leader or proclaimed value, until SIGINT or SIGTERM (then exit 0).

Candidates are elected in the order they arrived, with the same keys as
etcdctl elect and etcd's concurrency package.`,
		Example: `  # run the scheduler on one host at a time; another host takes over when it fails
  etcdlock elect --ttl 10 scheduler "$(hostname)" -- /usr/local/bin/scheduler

  # run a migration once, by whichever host is elected first
  etcdlock elect --once migrate "$(hostname)" -- /usr/local/bin/migrate`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				if dash != 2 || len(args) == 2 {
					return usagef("elect NAME PROPOSAL -- COMMAND: need a NAME and a PROPOSAL before --, and a command after it")
				}
				return nil
			}
			if err := cobra.RangeArgs(1, 2)(cmd, args); err != nil {
				return withCode(exitUsage, err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.quiet = conn.quiet
			var command []string
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				args, command = args[:dash], args[dash:]
			}
			switch {
			case command != nil && o.listen:
				return usagef("elect --listen takes no command")
			case command == nil && o.once:
				return usagef("elect --once needs a command after --")
			case o.killGrace < 0:
				return usagef("--kill-grace must not be negative, not %v", o.killGrace)
			case o.health.validate() != nil:
				return o.health.validate()
			case args[0] == "":
				return usagef("elect NAME must not be empty: %w", concurrency.ErrInvalidPrefix)
			case o.listen && len(args) == 2:
				return usagef("elect --listen takes no PROPOSAL")
			case !o.listen && len(args) == 1:
				return usagef("elect needs a PROPOSAL, or --listen to observe")
			case o.ttl <= 0:
				return withCode(exitUsage, fmt.Errorf("--ttl %d: %w", o.ttl, concurrency.ErrInvalidTTL))
			}
			if command != nil {
				if err := checkCommand(command[0]); err != nil {
					return err
				}
			}
			srv, stopMetrics, err := serveMetrics(o.metrics, o.quiet, cmd.ErrOrStderr(), fmt.Sprintf("leading %q", args[0]))
			if err != nil {
				return err
			}
			defer stopMetrics()
			if o.listen {
				return o.observe(conn, args[0], cmd.OutOrStdout())
			}
			if command != nil {
				return o.supervise(conn, args[0], args[1], command, srv, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return o.campaign(conn, args[0], args[1], srv, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.listen, "listen", "l", false, "observe the leaders instead of campaigning")
	f.IntVar(&o.ttl, "ttl", 10, "TTL of the session's lease in seconds: how long a leadership outlives a crashed leader")
	f.BoolVar(&o.once, "once", false, "with a command: run it at most once; exit 122 if the leadership is lost instead of campaigning again")
	durationVar(f, &o.killGrace, "kill-grace", 10*time.Second, "with a command: after the leadership is lost, time between --signal and SIGKILL to the command's process group; 0 sends SIGKILL at once")
	o.signal = signalValue(syscall.SIGTERM)
	f.VarP(&o.signal, "signal", "s", "with a command: after the leadership is lost, send this signal (a name such as TERM, HUP, INT, USR1, or a number) to the command's process group, as timeout -s, then SIGKILL after --kill-grace")
	f.StringVar(&o.metrics, "metrics-addr", "", metricsFlagUsage)
	f.BoolVar(&o.fg, "foreground", false, foregroundUsage)
	o.health.add(f)
	f.BoolVar(&o.yield, "yield", false, "let go when 'etcdlock yield NAME' asks: as on a loss, the command is stopped and etcdlock campaigns again (exits 122 with --once or without a command)")
	cmd.RegisterFlagCompletionFunc("signal", completeSignal)
	return cmd
}

func (o *electOptions) campaign(conn *connFlags, name, proposal string, srv served, stdout, stderr io.Writer) error {
	waiting := fmt.Sprintf("while campaigning in %q", name)
	own := owner("elect", nil)
	opts := []concurrency.SessionOption{concurrency.WithMetrics(srv.metrics), concurrency.WithOwner(own)}
	if o.yield {
		opts = append(opts, concurrency.WithYield())
	}
	opts = append(opts, o.health.sessionOptions()...)
	c, err := newContender(conn, name, o.ttl, waiting, opts...)
	if err != nil {
		return err
	}
	defer c.close()
	wctx := c.ctx
	// An election key's value is the proposal: the times go into the
	// owner record, for inspect (only informs: a failure changes nothing).
	md := newMeta(time.Now())
	rctx, cancel := conn.requestCtx(wctx)
	annotateOwner(rctx, c.cli, c.s.Lease(), own, md)
	cancel()

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
		c.lost()
		return orInterrupted(wctx, waiting, withCode(exitLost, fmt.Errorf("campaigning in %q: %w", name, err)))
	case err != nil:
		return orInterrupted(wctx, waiting, fmt.Errorf("campaigning in %q: %w", name, err))
	case wctx.Err() != nil:
		resign()
		return interrupted(wctx, "just as the campaign was won")
	}

	hold := e.Ctx()
	srv.health.watch(hold)
	md.HeldSince = time.Now().UTC()
	rctx, cancel = conn.requestCtx(hold)
	annotateOwner(rctx, c.cli, c.s.Lease(), own, md)
	cancel()
	fmt.Fprintln(stdout, e.Key())
	if !o.quiet {
		fmt.Fprintf(stderr, "etcdlock: leader of %q as %s (revision %d) until SIGINT or SIGTERM\n", name, e.Key(), e.Rev())
	}
	select {
	case <-c.sigc:
		resign()
		return nil
	case <-hold.Done():
		c.lost()
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
	defer closeSession(conn.commandTimeout)
	for resp := range concurrency.NewElection(s, name).Observe(ctx) {
		fmt.Fprintln(stdout, string(resp.Kvs[0].Value))
	}
	return nil
}

// errLostOnce ends a supervisor with --once whose leadership was lost.
var errLostOnce = errors.New("leadership lost with --once")

// supervise campaigns in name with proposal and runs command each time it
// is elected, until the command exits by itself as the leader, a signal
// ends it, or (with --once) the leadership is lost.
func (o *electOptions) supervise(conn *connFlags, name, proposal string, command []string, srv served, stdout, stderr io.Writer) error {
	if _, err := conn.config(); err != nil {
		return err
	}
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	// ctx is Lead's: a signal ends it while no command runs; while one
	// runs, the signal goes to the command.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	router := &signalRouter{cancel: cancel}
	stopRouter := router.start(sigc)
	defer stopRouter()

	waiting := fmt.Sprintf("while campaigning in %q", name)
	cli, err := conn.connect(ctx, lockPrefix(name))
	if err != nil {
		return orInterrupted(ctx, waiting, err)
	}
	defer cli.Close()

	var (
		result  error     // the last command's result, as etcdlock's exit
		lostErr error     // with --once: why the leadership ended
		stopSig os.Signal // the signal after which the command exited

		lostOnce = make(chan struct{}) // closed when --once ends on a loss
		own      = owner("elect", command)
		// Lead's sessions are its own: the leader's owner record gets
		// the times, waiting since etcdlock began or the last term ended.
		campaigning = time.Now()
	)
	fn := func(lctx context.Context, e *concurrency.Election) error {
		key, rev := e.Key(), e.Rev()
		defer func() { campaigning = time.Now() }()
		if lease, ok := keyLease(key); ok {
			md := newMeta(campaigning)
			md.HeldSince = time.Now().UTC()
			rctx, cancel := conn.requestCtx(lctx)
			annotateOwner(rctx, cli, lease, own, md)
			cancel()
		}
		if !o.quiet {
			fmt.Fprintf(stderr, "etcdlock: leader of %q as %s (revision %d); running %s\n", name, key, rev, command[0])
		}
		fwd := make(chan os.Signal, 4)
		router.forward(fwd)
		sup := supervised{
			command:    command,
			env:        []string{"ETCD_ELECT_KEY=" + key, "ETCD_ELECT_REV=" + strconv.FormatInt(rev, 10)},
			killGrace:  o.killGrace,
			stopSignal: syscall.Signal(o.signal),
			foreground: o.fg,
			what:       fmt.Sprintf("the leadership of %q", name),
		}
		passed, err := sup.run(lctx, fwd, stdout, stderr)
		router.forward(nil)
		select {
		case sig := <-fwd: // came as the command exited
			passed = sig
		default:
		}
		if errors.As(err, new(*codedError)) {
			return err // did not start: Lead resigns and returns it
		}
		result = exitStatus(err)
		lost := lctx.Err() != nil && ctx.Err() == nil
		switch {
		case passed != nil:
			// The command ended after a signal: stop here, with its status.
			stopSig = passed
			cancel(signalError{passed})
		case lost && o.once:
			lostErr = withCode(exitLost, fmt.Errorf("lost the leadership of %q while %s ran: %w", name, command[0], context.Cause(lctx)))
			cancel(errLostOnce)
			close(lostOnce)
		case lost && !o.quiet:
			fmt.Fprintf(stderr, "etcdlock: %s exited after the leadership of %q was lost; campaigning again\n", command[0], name)
		}
		return result
	}
	if !o.quiet {
		fmt.Fprintf(stderr, "etcdlock: campaigning in %q with %q\n", name, oneLine(proposal))
	}
	status := &concurrency.LeaderStatus{}
	srv.health.set(func() bool {
		leading, _ := status.Leading()
		return leading
	})
	leadc := make(chan error, 1)
	go func() {
		opts := []concurrency.LeadOption{concurrency.WithLeadTTL(o.ttl),
			concurrency.WithLeadMetrics(srv.metrics), concurrency.WithStatus(status),
			concurrency.WithLeadOwner(own)}
		if o.yield {
			opts = append(opts, concurrency.WithLeadYield())
		}
		opts = append(opts, o.health.leadOptions()...)
		leadc <- concurrency.Lead(ctx, cli, name, proposal, fn, opts...)
	}()
	select {
	case err = <-leadc:
	case <-lostOnce:
		// The command is gone. Lead now tries to resign the lost
		// leadership and to revoke its lease, for up to 5 s each while
		// etcd is unreachable (which is why most leaderships are lost),
		// retrying inside etcd's client even once it is closed. Give it
		// lostRevokeTimeout, as lock does, then exit without it: the
		// process's end stops it, and the lease expires on its own.
		select {
		case <-leadc:
		case <-time.After(lostRevokeTimeout):
		}
		return lostErr
	}
	switch {
	case ctx.Err() == nil:
		return err // the command's status, or why it did not start, or etcd's error
	case errors.Is(context.Cause(ctx), errLostOnce):
		return lostErr
	case stopSig != nil:
		return result // the command's status after the signal
	}
	return orInterrupted(ctx, waiting, err)
}

// signalRouter sends SIGINT, SIGTERM and SIGHUP to the running command, if
// any, and otherwise ends Lead's context with them.
type signalRouter struct {
	cancel context.CancelCauseFunc

	mu  sync.Mutex     // guards fwd
	fwd chan os.Signal // the running command's signals; nil when none runs
}

// start routes the signals of sigc until the returned function is called.
func (r *signalRouter) start(sigc <-chan os.Signal) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case sig := <-sigc:
				r.mu.Lock()
				if r.fwd != nil {
					select {
					case r.fwd <- sig:
					default:
					}
				} else {
					r.cancel(signalError{sig})
				}
				r.mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// forward sends signals to fwd, or with nil, ends Lead's context with them.
func (r *signalRouter) forward(fwd chan os.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fwd = fwd
}
