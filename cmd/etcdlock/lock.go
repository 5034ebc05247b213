package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
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
	ttl       int
	timeout   time.Duration
	try       bool
	killGrace time.Duration
	quiet     bool
	metrics   string // --metrics-addr
}

func newLockCommand(conn *connFlags) *cobra.Command {
	o := &lockOptions{}
	cmd := &cobra.Command{
		Use:   "lock [flags] NAME [-- COMMAND [ARGS...]]",
		Short: "Acquire a lock and hold it until a signal, or run a command under it",
		Long: `Acquire the lock NAME. Waiters are served in the order they arrived.

Without a command, print the lock key on stdout and hold the lock until
SIGINT, SIGTERM or SIGHUP, then release it and exit 0.

With a command, run it while holding the lock, with stdin, stdout and stderr
passed through and these variables in its environment:
  ETCD_LOCK_KEY  the lock key, NAME/<lease ID in hex>
  ETCD_LOCK_REV  the fencing token: the lock key's create revision, which is
                 larger for every later holder of NAME (etcdctl lock puts a
                 response revision here instead)
Release the lock when the command exits, and exit with its status. SIGINT,
SIGTERM and SIGHUP are passed on to the command. Put the command after "--"
when it has flags of its own.

If the lock is lost while the command runs (its key deleted, for example by
force-unlock, or its lease revoked or expired), send the command SIGTERM,
then SIGKILL after --kill-grace, and exit with code 122. Signals reach the
command's process only: a shell that starts other processes should exec the
last one.

While waiting, print on stderr who holds the lock and the place in the
queue, at most once every 5 s (not with --quiet). The lock key's value is
set to a small JSON record (host, pid, since when it waited and held) that
inspect shows; other clients ignore the value.

Exit codes: the command's status, or 2 (usage), 120 (etcd unreachable),
121 (auth), 122 (lock lost), 123 (--try: busy), 124 (--timeout),
126/127 (command cannot run / not found), 128+N (signal N while waiting).
See 'etcdlock --help'.`,
		Example: `  # one run of a cron job at a time across hosts, at most 10 minutes of waiting
  etcdlock --endpoints 10.0.0.1:2379 lock --timeout 10m nightly-report -- /usr/local/bin/report --full

  # skip this run if another is still going
  etcdlock lock --try nightly-report -- /usr/local/bin/report || [ $? -eq 123 ]

  # hold a lock in a bash script: the key is printed once the lock is held
  coproc etcdlock lock maintenance; read -r key <&"${COPROC[0]}"
  ...; kill "$COPROC_PID"; wait "$COPROC_PID"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, command, err := lockArgs(cmd.ArgsLenAtDash(), args)
			if err != nil {
				return err
			}
			return o.run(conn, name, command, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.ttl, "ttl", 10, "TTL of the session's lease in seconds: how long a lock outlives a crashed holder")
	f.DurationVar(&o.timeout, "timeout", 0, "give up waiting after this long (exit 124); 0 waits forever")
	f.BoolVar(&o.try, "try", false, "do not wait: exit 123 at once if the lock is held")
	f.DurationVar(&o.killGrace, "kill-grace", 10*time.Second, "after the lock is lost, time between SIGTERM and SIGKILL to the command; 0 sends SIGKILL at once")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no waiting and holding messages on stderr")
	f.StringVar(&o.metrics, "metrics-addr", "", metricsFlagUsage)
	return cmd
}

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
}

// newContender connects to etcd and starts a session with the given TTL
// for the queue name. A signal before it returns ends it with an error
// that says it came while doing what.
func newContender(conn *connFlags, name string, ttl int, what string, opts ...concurrency.SessionOption) (*contender, error) {
	if _, err := conn.config(); err != nil {
		return nil, err
	}
	c := &contender{sigc: make(chan os.Signal, 4)}
	signal.Notify(c.sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	c.ctx, c.endWait = untilSignal(c.sigc)
	stop := func() {
		c.endWait()
		signal.Stop(c.sigc)
	}
	var err error
	if c.cli, err = conn.connect(c.ctx, lockPrefix(name)); err == nil {
		var closeSession func()
		if c.s, closeSession, err = startSession(c.ctx, conn, c.cli, ttl, opts...); err == nil {
			c.close = func() {
				closeSession()
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
	metrics, stopMetrics, err := serveMetrics(o.metrics, o.quiet, stderr)
	if err != nil {
		return err
	}
	defer stopMetrics()
	c, err := newContender(conn, name, o.ttl, fmt.Sprintf("while waiting for lock %q", name), concurrency.WithMetrics(metrics))
	if err != nil {
		return err
	}
	defer c.close()
	cli, sigc, wctx := c.cli, c.sigc, c.ctx

	m := concurrency.NewMutex(c.s, name)
	since := time.Now()
	err = o.acquire(wctx, conn, cli, m, name, since, stderr)
	c.endWait()
	if err != nil {
		return o.waitError(wctx, conn, cli, name, err)
	}
	if ierr := interrupted(wctx, "just as the lock was acquired"); ierr != nil {
		o.release(conn, m, name, stderr)
		return ierr
	}

	key, token := m.Key(), m.Token()
	hold := m.Ctx()
	md := newMeta(since)
	md.HeldSince = time.Now().UTC()
	actx, cancel := conn.requestCtx(hold)
	annotate(actx, cli, key, token, md) // only informs inspect: a failure changes nothing
	cancel()

	if len(command) == 0 {
		fmt.Fprintln(stdout, key)
		if !o.quiet {
			fmt.Fprintf(stderr, "etcdlock: holding lock %q as %s (token %d) until SIGINT, SIGTERM or SIGHUP\n", name, key, token)
		}
		select {
		case <-sigc:
			o.release(conn, m, name, stderr)
			return nil
		case <-hold.Done():
			return lostError(name, hold, "")
		}
	}
	err = o.runCommand(name, command, key, token, hold, sigc, stdout, stderr)
	// After a loss this deletes nothing: Unlock only deletes the key it
	// acquired, and that is gone or goes with the lease.
	o.release(conn, m, name, stderr)
	return err
}

// startSession starts the session whose lease carries the lock key. Its
// first round trip is bounded by --command-timeout and by ctx; the session
// itself lives until the returned close function, which revokes the lease
// within --command-timeout.
func startSession(ctx context.Context, conn *connFlags, cli *clientv3.Client, ttl int, opts ...concurrency.SessionOption) (*concurrency.Session, func(), error) {
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
	closeSession := func() {
		t := time.AfterFunc(conn.commandTimeout, cancel)
		s.Close() // a lease that cannot be revoked expires after its TTL
		t.Stop()
		cancel()
	}
	return s, closeSession, nil
}

// acquire takes the lock: at once with --try, otherwise waiting (at most
// --timeout) and reporting the wait on stderr.
func (o *lockOptions) acquire(ctx context.Context, conn *connFlags, cli *clientv3.Client, m *concurrency.Mutex, name string, since time.Time, stderr io.Writer) error {
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
func (o *lockOptions) reportWaiting(ctx context.Context, conn *connFlags, cli *clientv3.Client, m *concurrency.Mutex, name string, since time.Time, stderr io.Writer) {
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
		if i := find(q, key); err == nil && i > 0 {
			if !annotated {
				annotated = annotate(rctx, cli, key, q[i].Rev, newMeta(since)) == nil
			}
			if !o.quiet && ctx.Err() == nil {
				fmt.Fprintf(stderr, "etcdlock: waiting for lock %q held by %s; position %d of %d in the queue\n",
					name, q[0].describe(time.Now()), i, len(q)-1)
			}
		}
		cancel()
		next.Reset(reportInterval)
	}
}

// waitError explains why the lock was not acquired, naming the holder where
// that helps.
func (o *lockOptions) waitError(wctx context.Context, conn *connFlags, cli *clientv3.Client, name string, err error) error {
	if ierr := interrupted(wctx, fmt.Sprintf("while waiting for lock %q", name)); ierr != nil {
		return ierr
	}
	switch {
	case errors.Is(err, concurrency.ErrLocked):
		return withCode(exitBusy, fmt.Errorf("lock %q is busy%s", name, holderNote(conn, cli, name)))
	case errors.Is(err, errLockTimeout):
		return withCode(exitTimeout, fmt.Errorf("gave up waiting for lock %q after --timeout %v%s", name, o.timeout, holderNote(conn, cli, name)))
	case errors.Is(err, concurrency.ErrSessionExpired):
		return withCode(exitLost, fmt.Errorf("while waiting for lock %q: %w", name, err))
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
	return fmt.Sprintf(": held by %s, %d waiting", q[0].describe(time.Now()), len(q)-1)
}

// lostError is the error of a hold that ended before it was released.
func lostError(name string, hold context.Context, while string) error {
	return withCode(exitLost, fmt.Errorf("lost lock %q%s: %w", name, while, context.Cause(hold)))
}

// release unlocks m within --command-timeout. If that fails, the key stays
// until the session's lease is revoked or expires.
func (o *lockOptions) release(conn *connFlags, m *concurrency.Mutex, name string, stderr io.Writer) {
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
		command:   command,
		env:       []string{"ETCD_LOCK_KEY=" + key, "ETCD_LOCK_REV=" + strconv.FormatInt(token, 10)},
		killGrace: o.killGrace,
		what:      fmt.Sprintf("lock %q", name),
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

// supervised is a command that runs while a lock or leadership lasts.
type supervised struct {
	command   []string
	env       []string      // variables added to etcdlock's environment
	killGrace time.Duration // between SIGTERM and SIGKILL once the hold ends
	what      string        // what the hold is, for messages: lock "NAME"
}

// run runs the command, passing on signals from sigc, until it exits. If
// hold ends first, it stops the command with SIGTERM and, after killGrace,
// SIGKILL. It returns the last signal it passed on, if any, and the
// command's Wait error (an *exec.ExitError for a non-zero status), or a
// codedError with exitNoCommand or exitCannotExec if it did not start.
func (sup supervised) run(hold context.Context, sigc <-chan os.Signal, stdout, stderr io.Writer) (os.Signal, error) {
	command := sup.command
	c := exec.Command(command[0], command[1:]...)
	// The last of duplicate variables wins: these replace inherited ones.
	c.Env = append(os.Environ(), sup.env...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, stdout, stderr
	if err := c.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNoCommand
		}
		return nil, withCode(code, err)
	}
	waitc := make(chan error, 1)
	go func() { waitc <- c.Wait() }()

	var passed os.Signal
	lostc := hold.Done()
	var killc <-chan time.Time
	for {
		select {
		case err := <-waitc:
			return passed, err
		case sig := <-sigc:
			c.Process.Signal(sig)
			passed = sig
		case <-lostc:
			lostc = nil
			if sup.killGrace == 0 {
				fmt.Fprintf(stderr, "etcdlock: lost %s (%v); sending SIGKILL to %s (pid %d)\n", sup.what, context.Cause(hold), command[0], c.Process.Pid)
				c.Process.Kill()
				continue
			}
			fmt.Fprintf(stderr, "etcdlock: lost %s (%v); sending SIGTERM to %s (pid %d), SIGKILL in %v\n", sup.what, context.Cause(hold), command[0], c.Process.Pid, sup.killGrace)
			c.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(sup.killGrace)
			defer t.Stop()
			killc = t.C
		case <-killc:
			killc = nil
			fmt.Fprintf(stderr, "etcdlock: %s (pid %d) still running %v after SIGTERM; sending SIGKILL\n", command[0], c.Process.Pid, sup.killGrace)
			c.Process.Kill()
		}
	}
}

// exitStatus turns the result of a command's Wait into etcdlock's result:
// nil for success, its exit code, or 128+N if signal N killed it.
func exitStatus(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return withCode(exitSignal+int(ws.Signal()), errSilent)
	}
	return withCode(ee.ExitCode(), errSilent)
}
