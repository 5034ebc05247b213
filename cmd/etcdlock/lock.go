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
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/seed-a9d410c6/concurrency"
)

// reportInterval is the time between two waiting messages.
const reportInterval = 5 * time.Second

type lockOptions struct {
	ttl         int
	timeout     time.Duration
	try         bool
	killGrace   time.Duration
	signal      signalValue   // --signal: sent to the command's group when the lock is lost
	conflict    exitCodeValue // --conflict-exit-code: for --try busy and --timeout
	setConflict bool          // --conflict-exit-code was given
	quiet       bool
	limit       int           // --limit: a Semaphore with this many permits; 0 without the flag
	setLimit    bool          // --limit was given (so that --limit 0 is refused)
	weight      int           // --weight: how many of the semaphore's permits to hold; 1 without the flag
	setWeight   bool          // --weight was given
	shared      bool          // --shared: an RWMutex's read side
	exclusive   bool          // --exclusive: an RWMutex's write side
	metrics     string        // --metrics-addr
	fg          bool          // --foreground
	maxHold     time.Duration // --max-hold: 0 bounds nothing
	yield       bool          // --yield: let go when 'etcdlock yield' asks
	lockDelay   time.Duration // --lock-delay: 0 for none
	health      healthFlags   // --health-cmd, --health-interval, --health-failures

	own   concurrency.Owner // the session's owner record
	lease clientv3.LeaseID  // the session's lease
}

// locker is the one lock a lock command takes: a Mutex (plain lock), a
// Semaphore's permit (--limit) or a side of an RWMutex (--shared,
// --exclusive).
type locker interface {
	Lock(ctx context.Context) error
	TryLock(ctx context.Context) error
	Unlock(ctx context.Context) error
	Key() string
	Token() int64
	Ctx() context.Context
}

type semLocker struct {
	*concurrency.Semaphore
	weight int
}

func (l semLocker) Lock(ctx context.Context) error    { return l.AcquireN(ctx, l.weight) }
func (l semLocker) TryLock(ctx context.Context) error { return l.TryAcquireN(ctx, l.weight) }
func (l semLocker) Unlock(ctx context.Context) error  { return l.Release(ctx) }

type readLocker struct{ *concurrency.RWMutex }

func (l readLocker) Lock(ctx context.Context) error    { return l.RLock(ctx) }
func (l readLocker) TryLock(ctx context.Context) error { return l.TryRLock(ctx) }
func (l readLocker) Unlock(ctx context.Context) error  { return l.RUnlock(ctx) }

// kind names what o locks, for messages.
func (o *lockOptions) kind() string {
	switch {
	case o.setLimit && o.weight > 1:
		return fmt.Sprintf("semaphore (limit %d, weight %d)", o.limit, o.weight)
	case o.setLimit:
		return fmt.Sprintf("semaphore (limit %d)", o.limit)
	case o.shared:
		return "rwmutex read side"
	case o.exclusive:
		return "rwmutex write side"
	}
	return "mutex"
}

// sessionOptions are the options of the session of a lock command.
func (o *lockOptions) sessionOptions(srv served) []concurrency.SessionOption {
	opts := []concurrency.SessionOption{concurrency.WithMetrics(srv.metrics), concurrency.WithOwner(o.own),
		concurrency.WithMaxHold(o.maxHold), concurrency.WithLockDelay(o.lockDelay)}
	if o.yield {
		opts = append(opts, concurrency.WithYield())
	}
	return append(opts, o.health.sessionOptions()...)
}

// newLocker returns the lock that o asks for, named name, on session s.
func (o *lockOptions) newLocker(s *concurrency.Session, name string) locker {
	switch {
	case o.setLimit:
		return semLocker{concurrency.NewSemaphore(s, name, o.limit), max(o.weight, 1)}
	case o.shared:
		return readLocker{concurrency.NewRWMutex(s, name)}
	case o.exclusive:
		return concurrency.NewRWMutex(s, name)
	}
	return concurrency.NewMutex(s, name)
}

func newLockCommand(conn *connFlags) *cobra.Command {
	o := &lockOptions{}
	cmd := &cobra.Command{
		Use:   "lock [flags] NAME [-- COMMAND [ARGS...]]",
		Short: "Acquire a lock and hold it until a signal, or run a command under it",
		Long: `Acquire the lock NAME. Waiters are served in the order they arrived.

Kinds of lock, chosen by flags; one name is used by one kind at a time:
  (none)           a mutex, with etcd's keys NAME/<lease>: it excludes
                   'etcdctl lock' and etcd's concurrency.Mutex on NAME
  --limit N, -n N  one of N permits of a semaphore: at most N holders at
                   once (like 'consul lock -n N'); keys NAME/<lease>-<seq>
                   whose value is N. Every user of NAME must give the same N
  --weight W       with --limit: hold W of the N permits at once (W from 1
                   to N; the key's value is then N/W). Permits go strictly
                   in arrival order: a waiter that does not fit yet holds
                   back the smaller ones behind it
  --shared         the read side of a reader/writer lock: any number of
                   --shared holders at once, none while an --exclusive holds
  --exclusive      the write side of the same reader/writer lock: alone
Readers and writers queue together, so a waiting --exclusive is not starved
by later --shared ones. Plain lock is not the write side of --shared: it
keeps etcd's mutex keys so that etcdctl interoperates, and it refuses (exit
1) a name that holds reader/writer or semaphore keys, pointing at
--exclusive or --limit, rather than mix kinds. Likewise --limit, --shared
and --exclusive refuse (exit 1) a name in use by another kind of lock, and
--limit a semaphore in use with another limit. The kind is checked from
the name's keys before queueing; a key of another kind written just after
that check is not seen by it.

Without a command, print the lock key on stdout and hold the lock until
SIGINT, SIGTERM or SIGHUP, then release it and exit 0.

With a command, run it while holding the lock, with stdin, stdout and stderr
passed through and these variables in its environment:
  ETCD_LOCK_KEY  the lock key, NAME/<lease ID in hex> (see above for
                 --limit, --shared and --exclusive)
  ETCD_LOCK_REV  the fencing token: the lock key's create revision, which is
                 larger for every later holder of NAME (etcdctl lock puts a
                 response revision here instead)
Release the lock when the command exits, and exit with its status. Put the
command after "--" when it has flags of its own.

` + processGroupHelp + `

While waiting, print on stderr who holds the lock and the place in the
queue, at most once every 5 s (not with --quiet). The lock key's value is
set to a small JSON record (host, pid, since when it waited and held) that
inspect shows; other clients ignore the value. (Not with --limit: the value
of a semaphore key is its limit.) The session also records its owner (host,
pid, and the label "etcdlock lock", followed by ": " and the base name of
the command if there is one) beside its lease, under
/_concurrency/owner/, which inspect shows for every kind of lock; where the
user may not write there, the lock works without it.

--max-hold D bounds the hold to D even while etcdlock and the command run
(Redisson's leaseTime): the key moves, with its token, to a lease of its own
that etcdlock never renews, so etcd removes it D after the grant even if
etcdlock is cut off or stopped; after D (less a tenth, at most 1 s) the
command is stopped as on a loss, and etcdlock exits 122. A crashed holder
then keeps the lock until D, not --ttl.

--lock-delay D (Consul's lock-delay, Chubby's): after a hold that ended by
loss (lease expired or revoked, key deleted by force-unlock) rather than by
its holder's release, take the lock only D later, so that a holder that
lost it without knowing has time to stop before this command starts; for
resources that cannot check ETCD_LOCK_REV. A release by 'etcdlock lock
--lock-delay' is recorded and waits for nothing; one by etcdctl lock,
etcd's package or 'etcdlock lock' without the flag is told from a loss by
its lease: a key deleted while its lease lives waits for nothing (even if
someone else, such as force-unlock, deleted it), one whose lease is gone
waits D. With --try, a lock in its delay is busy (exit 123).

--health-cmd CMD (Consul's session health checks) runs the shell command
CMD every --health-interval (default 10s) while waiting and holding; after
--health-failures (default 3) failures in a row (a status other than 0, or
still running at the next interval), the session ends and its lease is
revoked, so the lock goes to the next waiter at once and the command is
stopped as on a loss (exit 122): a stuck service stops holding the lock
although etcdlock itself still renews it.

--yield lets 'etcdlock yield NAME' (or the library's RequestYield) ask this
holder to let go: the command is then stopped as on a loss, and etcdlock
exits 122. Without it, requests are ignored.

Exit codes: the command's status, or 1 (among other errors: the name is
in use by another kind of lock, or a semaphore with another limit),
2 (usage, including --limit below 1), 120 (etcd unreachable),
121 (auth), 122 (lock lost), 123 (--try: busy), 124 (--timeout) (123
and 124 are replaced by --conflict-exit-code N, as flock -E does),
126/127 (command cannot run / not found: checked before queueing, so such
a command never takes a place in the queue), 128+N (signal N while
waiting).
See 'etcdlock --help'.`,
		Example: `  # one run of a cron job at a time across hosts, at most 10 minutes of waiting
  etcdlock --endpoints 10.0.0.1:2379 lock --timeout 10m nightly-report -- /usr/local/bin/report --full

  # at most 3 backups at once across the fleet
  etcdlock lock --limit 3 backups -- /usr/local/bin/backup

  # many readers of a shared directory at once, a writer alone
  etcdlock lock --shared dataset -- rsync -a /data/ /mnt/copy/
  etcdlock lock --exclusive dataset -- /usr/local/bin/refresh-data

  # skip this run if another is still going
  etcdlock lock --try nightly-report -- /usr/local/bin/report || [ $? -eq 123 ]
  # the same, as flock -n -E 0 does it: a busy lock exits 0
  etcdlock lock --try -E 0 nightly-report -- /usr/local/bin/report

  # a job that must never hold the lock more than 15 minutes
  etcdlock lock --max-hold 15m nightly-report -- /usr/local/bin/report

  # wait at most 30 seconds (as flock -w 30); on a loss, send SIGHUP (as timeout -s HUP)
  etcdlock lock --timeout 30 --signal HUP config-reload -- /usr/local/bin/reload

  # hold a lock in a bash script: the key is printed once the lock is held
  coproc etcdlock lock maintenance; read -r key <&"${COPROC[0]}"
  ...; kill "$COPROC_PID"; wait "$COPROC_PID"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, command, err := lockArgs(cmd.ArgsLenAtDash(), args)
			if err != nil {
				return err
			}
			o.setLimit = cmd.Flags().Changed("limit")
			o.setWeight = cmd.Flags().Changed("weight")
			o.setConflict = cmd.Flags().Changed("conflict-exit-code")
			o.quiet = conn.quiet
			return o.run(conn, name, command, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.ttl, "ttl", 10, "TTL of the session's lease in seconds: how long a lock outlives a crashed holder")
	durationVar(f, &o.timeout, "timeout", 0, "give up waiting after this long (exit 124, or --conflict-exit-code); 0 waits forever")
	f.BoolVar(&o.try, "try", false, "do not wait: exit 123 (or --conflict-exit-code) at once if the lock is held")
	f.VarP(&o.conflict, "conflict-exit-code", "E", "exit with this code (0 to 255) instead of 123 when --try finds the lock held, and of 124 when --timeout passes, as flock -E")
	durationVar(f, &o.killGrace, "kill-grace", 10*time.Second, "after the lock is lost, time between --signal and SIGKILL to the command's process group; 0 sends SIGKILL at once")
	o.signal = signalValue(syscall.SIGTERM)
	f.VarP(&o.signal, "signal", "s", "after the lock is lost, send this signal (a name such as TERM, HUP, INT, USR1, or a number) to the command's process group, as timeout -s, then SIGKILL after --kill-grace")
	f.IntVarP(&o.limit, "limit", "n", 0, "hold one of this many permits of a semaphore named NAME (at least 1)")
	f.IntVar(&o.weight, "weight", 1, "with --limit: hold this many of the semaphore's permits at once (1 to --limit)")
	f.BoolVar(&o.shared, "shared", false, "hold the read side of a reader/writer lock named NAME")
	f.BoolVar(&o.exclusive, "exclusive", false, "hold the write side of a reader/writer lock named NAME")
	f.StringVar(&o.metrics, "metrics-addr", "", metricsFlagUsage)
	f.BoolVar(&o.fg, "foreground", false, foregroundUsage)
	o.health.add(f)
	durationVar(f, &o.lockDelay, "lock-delay", 0, "after a holder lost the lock (rather than released it), take it only this much later, for resources that cannot check ETCD_LOCK_REV (plain mutex only); 0 for none")
	f.BoolVar(&o.yield, "yield", false, "let go when 'etcdlock yield NAME' asks: the command is stopped as on a loss (exit 122)")
	durationVar(f, &o.maxHold, "max-hold", 0, "hold the lock this long at most (at least 1s), even while this process runs: the command is then stopped as on a loss (exit 122), and etcd removes the key itself if etcdlock cannot; 0 bounds nothing")
	cmd.RegisterFlagCompletionFunc("signal", completeSignal)
	return cmd
}

// processGroupHelp says how lock and elect stop their command (issue 21).
const processGroupHelp = `The command runs in a process group of its own, like a shell's job: SIGINT,
SIGTERM and SIGHUP sent to etcdlock are passed on to the whole group. If the
lock is lost while the command runs (its key deleted, for example by
force-unlock, or its lease revoked or expired), send the group SIGTERM (or
the signal of --signal, as timeout -s), then SIGKILL after --kill-grace, and exit with code 122 once the command has
exited and no process of its group is left (or SIGKILL was sent): the
background processes of 'sh -c "a & b"' are stopped with the shell, as
timeout(1) stops them. A process that leaves the group (setsid, a daemon)
is not stopped. Processes that the command leaves running when it exits by
itself are not waited for: they run on without the lock, so have the command
wait for them. With etcd unreachable, the exit does not wait on etcd: the
lock's key is on the session's lease, which etcd expires after --ttl.

In its own group, the command is in the background of the terminal: it
cannot read it (a read stops it with SIGTTIN), and the terminal's ^C comes
to etcdlock, which passes it on. --foreground runs the command in etcdlock's
process group instead, where it can read the terminal and gets ^C itself,
but then signals, and the --signal and SIGKILL after a loss, reach the
command's own process only, not the processes it started: a shell should
exec the last one.`

// foregroundUsage is the help of --foreground, for lock and elect.
const foregroundUsage = "run the command in etcdlock's process group, so that it can read the terminal; signals then reach its own process only, not the processes it starts"

// lockArgs splits NAME [--] COMMAND ARGS...; dash is the number of
// arguments before "--", or -1.
func lockArgs(dash int, args []string) (string, []string, error) {
	switch {
	case dash == 0:
		return "", nil, usagef("lock needs a NAME before --")
	case dash > 1:
		return "", nil, usagef("lock takes one NAME before --, not %q", args[:dash])
	case args[0] == "":
		return "", nil, usagef("lock NAME must not be empty: %w", concurrency.ErrInvalidPrefix)
	}
	return args[0], args[1:], nil
}

func (o *lockOptions) validate() error {
	switch {
	case o.ttl <= 0:
		return withCode(exitUsage, fmt.Errorf("--ttl %d: %w", o.ttl, concurrency.ErrInvalidTTL))
	case o.try && o.timeout != 0:
		return usagef("--try and --timeout cannot be used together")
	case o.timeout < 0:
		return usagef("--timeout must not be negative, not %v", o.timeout)
	case o.killGrace < 0:
		return usagef("--kill-grace must not be negative, not %v", o.killGrace)
	case o.health.validate() != nil:
		return o.health.validate()
	case o.lockDelay < 0:
		return withCode(exitUsage, fmt.Errorf("--lock-delay %v: %w", o.lockDelay, concurrency.ErrInvalidLockDelay))
	case o.lockDelay > 0 && (o.setLimit || o.shared || o.exclusive):
		return usagef("--lock-delay works with a plain lock only, not with --limit, --shared or --exclusive")
	case o.maxHold != 0 && o.maxHold < time.Second:
		return withCode(exitUsage, fmt.Errorf("--max-hold %v: %w", o.maxHold, concurrency.ErrInvalidMaxHold))
	case o.setLimit && o.limit < 1:
		return withCode(exitUsage, fmt.Errorf("--limit must be at least 1, not %d: %w", o.limit, concurrency.ErrInvalidLimit))
	case o.setWeight && !o.setLimit:
		return usagef("--weight needs --limit")
	case o.setWeight && o.weight < 1:
		return withCode(exitUsage, fmt.Errorf("--weight must be at least 1, not %d: %w", o.weight, concurrency.ErrInvalidWeight))
	case o.setWeight && o.weight > o.limit:
		return withCode(exitUsage, fmt.Errorf("--weight %d is more than --limit %d: %w", o.weight, o.limit, concurrency.ErrWeightExceedsLimit))
	case o.shared && o.exclusive:
		return usagef("--shared and --exclusive cannot be used together")
	case o.setLimit && (o.shared || o.exclusive):
		return usagef("--limit cannot be used with --shared or --exclusive")
	}
	return nil
}

// signalError is the cause of a wait ended by a signal.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "interrupted by " + signalName(e.sig) }

func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok && unix.SignalName(s) != "" {
		return unix.SignalName(s)
	}
	return sig.String()
}

// signalCode is the exit code for an interruption by sig.
func signalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignal + int(s)
	}
	return exitError
}

// errLockTimeout is the cause of a wait ended by --timeout.
var errLockTimeout = errors.New("--timeout passed")

// untilSignal returns a context that the first of SIGINT, SIGTERM and SIGHUP
// cancels (with a signalError cause), and a function that stops watching
// for signals, after which they arrive on sigc.
func untilSignal(sigc <-chan os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case sig := <-sigc:
			cancel(signalError{sig})
		case <-stop:
		}
	}()
	return ctx, sync.OnceFunc(func() {
		close(stop)
		<-done
	})
}

// withSignals returns a context that the first of SIGINT, SIGTERM and
// SIGHUP cancels, with a signalError cause, and a function that stops
// catching them.
func withSignals() (context.Context, func()) {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	ctx, stop := untilSignal(sigc)
	return ctx, func() {
		stop()
		signal.Stop(sigc)
	}
}

// interrupted returns the error for a wait that ctx's signal ended, or nil.
func interrupted(ctx context.Context, what string) error {
	var se signalError
	if errors.As(context.Cause(ctx), &se) {
		return withCode(signalCode(se.sig), fmt.Errorf("%v %s", se, what))
	}
	return nil
}

// orInterrupted returns the error for a wait that ctx's signal ended, if it
// did, and err otherwise.
func orInterrupted(ctx context.Context, what string, err error) error {
	if ierr := interrupted(ctx, what); ierr != nil {
		return ierr
	}
	return err
}

// contender is what lock and elect set up before they wait: the signals
// they catch, a client and a session.
type contender struct {
	sigc    chan os.Signal  // SIGINT, SIGTERM, SIGHUP, once endWait has returned
	ctx     context.Context // cancelled by the first signal before endWait
	endWait func()          // stops ending ctx on a signal; idempotent
	cli     *clientv3.Client
	s       *concurrency.Session
	close   func() // closes the session (revoking its lease) and the client

	// revokeWithin bounds the revoke of close: --command-timeout, or
	// lostRevokeTimeout once the hold was lost (lost sets it).
	revokeWithin time.Duration
}

// lostRevokeTimeout bounds the revoke of the session's lease after a lock
// or leadership was lost, so that etcdlock exits promptly when etcd is
// unreachable (which is why most holds are lost). Nothing is lost by giving
// up: the lost key is gone or is on that lease, which etcd expires after
// its TTL without renewals.
const lostRevokeTimeout = time.Second

// lost marks the hold as lost: close revokes the lease within
// lostRevokeTimeout at most.
func (c *contender) lost() { c.revokeWithin = min(c.revokeWithin, lostRevokeTimeout) }

// newContender connects to etcd and starts a session with the given TTL
// for the queue name. A signal before it returns ends it with an error
// that says it came while doing what.
func newContender(conn *connFlags, name string, ttl int, what string, opts ...concurrency.SessionOption) (*contender, error) {
	if _, err := conn.config(); err != nil {
		return nil, err
	}
	c := &contender{sigc: make(chan os.Signal, 4), revokeWithin: conn.commandTimeout}
	signal.Notify(c.sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	c.ctx, c.endWait = untilSignal(c.sigc)
	stop := func() {
		c.endWait()
		signal.Stop(c.sigc)
	}
	var err error
	if c.cli, err = conn.connect(c.ctx, lockPrefix(name)); err == nil {
		var closeSession func(time.Duration)
		if c.s, closeSession, err = startSession(c.ctx, conn, c.cli, ttl, opts...); err == nil {
			c.close = func() {
				closeSession(c.revokeWithin)
				c.cli.Close()
				stop()
			}
			return c, nil
		}
		c.cli.Close()
	}
	stop()
	return nil, orInterrupted(c.ctx, what, err)
}

func (o *lockOptions) run(conn *connFlags, name string, command []string, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	if len(command) > 0 {
		if err := checkCommand(command[0]); err != nil {
			return err
		}
	}
	srv, stopMetrics, err := serveMetrics(o.metrics, o.quiet, stderr, fmt.Sprintf("holding lock %q", name))
	if err != nil {
		return err
	}
	defer stopMetrics()
	o.own = owner("lock", command)
	c, err := newContender(conn, name, o.ttl, fmt.Sprintf("while waiting for lock %q", name),
		o.sessionOptions(srv)...)
	if err != nil {
		return err
	}
	defer c.close()
	o.lease = c.s.Lease()
	cli, sigc, wctx := c.cli, c.sigc, c.ctx

	if err := o.kindAllowed(wctx, conn, cli, name); err != nil {
		return orInterrupted(wctx, fmt.Sprintf("while waiting for lock %q", name), err)
	}
	m := o.newLocker(c.s, name)
	since := time.Now()
	err = o.acquire(wctx, conn, cli, m, name, since, stderr)
	c.endWait()
	if err != nil {
		if errors.Is(err, concurrency.ErrSessionExpired) {
			c.lost()
		}
		return o.waitError(wctx, conn, cli, name, err)
	}
	if ierr := interrupted(wctx, "just as the lock was acquired"); ierr != nil {
		o.release(conn, m, name, stderr)
		return ierr
	}

	key, token := m.Key(), m.Token()
	hold := m.Ctx()
	srv.health.watch(hold)
	md := newMeta(since)
	md.HeldSince = time.Now().UTC()
	// Both only inform inspect: a failure changes nothing.
	actx, cancel := conn.requestCtx(hold)
	if o.setLimit { // a semaphore key's value is its limit
		annotateOwner(actx, cli, o.lease, o.own, md)
	} else {
		annotate(actx, cli, key, token, md)
	}
	cancel()

	if len(command) == 0 {
		fmt.Fprintln(stdout, key)
		if !o.quiet {
			fmt.Fprintf(stderr, "etcdlock: holding lock %q (%s) as %s (token %d) until SIGINT, SIGTERM or SIGHUP\n", name, o.kind(), key, token)
		}
		select {
		case <-sigc:
			o.release(conn, m, name, stderr)
			return nil
		case <-hold.Done():
			c.lost()
			return lostError(name, hold, "")
		}
	}
	err = o.runCommand(name, command, key, token, hold, sigc, stdout, stderr)
	if hold.Err() != nil {
		// Lost: there is nothing to release. The key is gone (deleted,
		// or its lease revoked or expired), or it is on the session's
		// lease, which close revokes within lostRevokeTimeout and etcd
		// expires otherwise. Waiting --command-timeout for an Unlock
		// would only delay the exit while etcd is unreachable.
		c.lost()
		return err
	}
	o.release(conn, m, name, stderr)
	return err
}

// startSession starts the session whose lease carries the lock key. Its
// first round trip is bounded by --command-timeout and by ctx; the session
// itself lives until the returned close function, which revokes the lease
// within the duration it is given.
func startSession(ctx context.Context, conn *connFlags, cli *clientv3.Client, ttl int, opts ...concurrency.SessionOption) (*concurrency.Session, func(time.Duration), error) {
	sctx, cancel := context.WithCancel(context.Background())
	stopOnCtx := context.AfterFunc(ctx, cancel)
	timer := time.AfterFunc(conn.commandTimeout, cancel)
	s, err := concurrency.NewSession(cli, append([]concurrency.SessionOption{concurrency.WithTTL(ttl), concurrency.WithContext(sctx)}, opts...)...)
	timedOut := !timer.Stop()
	stopOnCtx()
	if err == nil && sctx.Err() != nil {
		// The timer or ctx ended the session just after it started.
		s.Orphan()
		err = sctx.Err()
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		cancel()
		return nil, nil, ctx.Err()
	case timedOut:
		cancel()
		return nil, nil, withCode(exitUnreachable, fmt.Errorf("starting a session: etcd granted no lease within --command-timeout %v", conn.commandTimeout))
	default:
		cancel()
		return nil, nil, fmt.Errorf("starting a session: %w", err)
	}
	closeSession := func(d time.Duration) {
		t := time.AfterFunc(d, cancel)
		s.Close() // a lease that cannot be revoked expires after its TTL
		t.Stop()
		cancel()
	}
	return s, closeSession, nil
}

// acquire takes the lock: at once with --try, otherwise waiting (at most
// --timeout) and reporting the wait on stderr.
func (o *lockOptions) acquire(ctx context.Context, conn *connFlags, cli *clientv3.Client, m locker, name string, since time.Time, stderr io.Writer) error {
	if o.try {
		rctx, cancel := conn.requestCtx(ctx)
		defer cancel()
		return m.TryLock(rctx)
	}
	lctx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeoutCause(ctx, o.timeout, errLockTimeout)
		defer cancel()
	}
	rctx, stopReport := context.WithCancel(lctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		o.reportWaiting(rctx, conn, cli, m, name, since, stderr)
	}()
	err := m.Lock(lctx)
	stopReport()
	wg.Wait()
	if err != nil && errors.Is(context.Cause(lctx), errLockTimeout) {
		return errLockTimeout
	}
	return err
}

// reportWaiting runs while Lock waits. Once Lock has queued its key, it
// writes this process's metadata into it and, every reportInterval, prints
// the holder and the key's place in the queue.
func (o *lockOptions) reportWaiting(ctx context.Context, conn *connFlags, cli *clientv3.Client, m locker, name string, since time.Time, stderr io.Writer) {
	// Lock sets Key once it has written the key and found the lock held.
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	key := ""
	for key == "" {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			key = m.Key()
		}
	}
	poll.Stop()

	annotated := false
	next := time.NewTimer(0)
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		}
		rctx, cancel := conn.requestCtx(ctx)
		q, _, err := readQueue(rctx, cli, name)
		held, waiting := holders(q)
		if i := find(waiting, key); err == nil && i >= 0 {
			switch {
			case annotated:
			case o.setLimit:
				annotated = annotateOwner(rctx, cli, o.lease, o.own, newMeta(since)) == nil
			default:
				annotated = annotate(rctx, cli, key, waiting[i].Rev, newMeta(since)) == nil
			}
			if !o.quiet && ctx.Err() == nil {
				fmt.Fprintf(stderr, "etcdlock: waiting for lock %q held by %s; position %d of %d in the queue\n",
					name, heldBy(held, time.Now()), i+1, len(waiting))
			}
		}
		cancel()
		next.Reset(reportInterval)
	}
}

// conflictCode is the exit code for a busy lock (code exitBusy) or a
// --timeout (exitTimeout): --conflict-exit-code if given, else code.
func (o *lockOptions) conflictCode(code int) int {
	if o.setConflict {
		return int(o.conflict)
	}
	return code
}

// waitError explains why the lock was not acquired, naming the holder where
// that helps.
func (o *lockOptions) waitError(wctx context.Context, conn *connFlags, cli *clientv3.Client, name string, err error) error {
	if ierr := interrupted(wctx, fmt.Sprintf("while waiting for lock %q", name)); ierr != nil {
		return ierr
	}
	switch {
	case errors.Is(err, concurrency.ErrLocked):
		return withCode(o.conflictCode(exitBusy), fmt.Errorf("lock %q is busy%s", name, holderNote(conn, cli, name)))
	case errors.Is(err, errLockTimeout):
		return withCode(o.conflictCode(exitTimeout), fmt.Errorf("gave up waiting for lock %q after --timeout %v%s", name, o.timeout, holderNote(conn, cli, name)))
	case errors.Is(err, concurrency.ErrSessionExpired):
		return withCode(exitLost, fmt.Errorf("while waiting for lock %q: %w", name, err))
	case errors.Is(err, concurrency.ErrLimitMismatch):
		return fmt.Errorf("lock %q is a semaphore with another limit than --limit %d: %w", name, o.limit, err)
	case errors.Is(err, concurrency.ErrLockKind):
		return fmt.Errorf("lock %q is in use by another kind of lock than a %s%s: %w", name, o.kind(), kindNote(conn, cli, name), err)
	}
	return fmt.Errorf("locking %q: %w", name, err)
}

// holderNote is ": held by ..." for an error message, or "" if the queue
// cannot be read or is empty.
func holderNote(conn *connFlags, cli *clientv3.Client, name string) string {
	ctx, cancel := conn.requestCtx(context.Background())
	defer cancel()
	q, _, err := readQueue(ctx, cli, name)
	if err != nil || len(q) == 0 {
		return ""
	}
	held, waiting := holders(q)
	return fmt.Sprintf(": held by %s, %d waiting", heldBy(held, time.Now()), len(waiting))
}

// kindNote is " (its keys are ...)" for an error message, or "".
func kindNote(conn *connFlags, cli *clientv3.Client, name string) string {
	ctx, cancel := conn.requestCtx(context.Background())
	defer cancel()
	q, _, err := readQueue(ctx, cli, name)
	if err != nil || len(q) == 0 {
		return ""
	}
	return fmt.Sprintf(" (its keys are of kind %s; see 'etcdlock inspect %s')", queueKind(q), name)
}

// kindAllowed refuses, before lock queues, a name whose keys are of
// another kind than o's lock, pointing at the flag that takes that kind.
// The library refuses older keys of another kind for --limit and
// --exclusive itself, but neither a Mutex nor an RWMutex reader (which
// only looks at writers' keys) can tell: without this check, plain lock on
// a reader/writer lock's name, or --shared on a mutex's or a semaphore's,
// would hold alongside it. A key of another kind written after the check
// is not seen; the check is for people mixing up names, not a lock.
func (o *lockOptions) kindAllowed(ctx context.Context, conn *connFlags, cli *clientv3.Client, name string) error {
	rctx, cancel := conn.requestCtx(ctx)
	defer cancel()
	q, _, err := readQueue(rctx, cli, name)
	if err != nil {
		return fmt.Errorf("reading lock %q: %w", name, err)
	}
	rw := o.shared || o.exclusive
	for _, e := range q {
		switch {
		case (e.Kind == kindReader || e.Kind == kindWriter) && !rw:
			return fmt.Errorf("lock %q is a reader/writer lock (key %s): use 'lock --exclusive' for its write side or 'lock --shared' for its read side: %w", name, e.Key, concurrency.ErrLockKind)
		case e.Kind == kindSemaphore && !o.setLimit:
			return fmt.Errorf("lock %q is a semaphore with limit %d (key %s): use 'lock --limit %d': %w", name, e.Limit, e.Key, e.Limit, concurrency.ErrLockKind)
		case e.Kind == kindMutex && (o.setLimit || rw):
			return fmt.Errorf("lock %q is a mutex (key %s): use plain 'lock', without --limit, --shared or --exclusive: %w", name, e.Key, concurrency.ErrLockKind)
		case e.Kind == kindOther:
			return fmt.Errorf("lock %q has a key of no kind etcdlock knows (%s): %w", name, e.Key, concurrency.ErrLockKind)
		}
	}
	return nil
}

// lostError is the error of a hold that ended before it was released.
func lostError(name string, hold context.Context, while string) error {
	return withCode(exitLost, fmt.Errorf("lost lock %q%s: %w", name, while, context.Cause(hold)))
}

// release unlocks m within --command-timeout. If that fails, the key stays
// until the session's lease is revoked or expires.
func (o *lockOptions) release(conn *connFlags, m locker, name string, stderr io.Writer) {
	ctx, cancel := conn.requestCtx(context.Background())
	defer cancel()
	if err := m.Unlock(ctx); err != nil && !errors.Is(err, concurrency.ErrLockReleased) {
		fmt.Fprintf(stderr, "etcdlock: releasing lock %q: %v (its key goes with the session's lease)\n", name, err)
	}
}

// runCommand runs command while the lock is held, passing on signals from
// sigc. If hold ends first, it stops the command with SIGTERM and, after
// --kill-grace, SIGKILL. It returns the command's exit status as a
// codedError, or an error with exitLost if the lock was lost.
func (o *lockOptions) runCommand(name string, command []string, key string, token int64, hold context.Context, sigc <-chan os.Signal, stdout, stderr io.Writer) error {
	sup := supervised{
		command:    command,
		env:        []string{"ETCD_LOCK_KEY=" + key, "ETCD_LOCK_REV=" + strconv.FormatInt(token, 10)},
		killGrace:  o.killGrace,
		stopSignal: syscall.Signal(o.signal),
		foreground: o.fg,
		what:       fmt.Sprintf("lock %q", name),
	}
	_, err := sup.run(hold, sigc, stdout, stderr)
	if errors.As(err, new(*codedError)) {
		return err // the command did not start
	}
	if hold.Err() != nil && !errors.Is(context.Cause(hold), concurrency.ErrLockReleased) {
		return lostError(name, hold, fmt.Sprintf(" while %s ran", command[0]))
	}
	return exitStatus(err)
}
