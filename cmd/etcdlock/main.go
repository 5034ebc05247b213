// Command etcdlock runs commands under etcd locks, takes part in elections,
// shows who holds a lock and who waits for it, breaks stuck locks, and
// demonstrates the lock against an embedded etcd. It is built on
// github.com/seed-a9d410c6/concurrency and uses the same keys as etcd's
// concurrency package, so it excludes `etcdctl lock` and `etcdctl elect` on
// the same names. Run `etcdlock --help` for the commands, the connection
// flags and environment variables, and the exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes. A command run by `lock` passes its own status through, so
// etcdlock's own codes sit where commands rarely exit (above 119) or follow
// the shell's conventions (2 for usage, 126 and 127 for a command that
// cannot run, 128+N for signal N). They are listed in exitCodesHelp.
const (
	exitOK          = 0
	exitError       = 1   // any other error
	exitUsage       = 2   // bad flag, argument or environment variable
	exitUnreachable = 120 // etcd did not answer within --dial-timeout or --command-timeout
	exitAuth        = 121 // authentication failed or permission denied
	exitLost        = 122 // the lock or leadership was lost while held or awaited
	exitBusy        = 123 // lock --try: the lock is held by someone else
	exitTimeout     = 124 // lock --timeout passed before the lock was acquired
	exitNotFound    = 125 // force-unlock: the key is not in the lock's queue; yield: nobody holds the name
	exitCannotExec  = 126 // the command could not be executed
	exitNoCommand   = 127 // the command was not found
	exitSignal      = 128 // plus the signal number: interrupted while waiting
)

const exitCodesHelp = `Exit codes:
  0    success; with a command, the command's own exit status
  1    any other error (etcd error, failed demo verification)
  2    bad flag, argument or environment variable
  120  etcd could not be reached within --dial-timeout (first contact) or
       --command-timeout (later requests)
  121  authentication failed or permission denied
  122  the lock (or leadership) was lost: its key was deleted (force-unlock),
       its lease revoked or expired; a running command was stopped
  123  lock --try: the lock is held by someone else (lock -E N: N instead)
  124  lock --timeout: the lock was not acquired in time (lock -E N: N)
  125  force-unlock: the key is not in the lock's queue; yield: nobody holds
       the name; nothing was changed
  126  the command could not be executed
  127  the command was not found
  128+N  interrupted by signal N before the lock was acquired, or the command
       was killed by signal N`

// codedError is an error with the exit code it causes.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// withCode gives err the exit code code.
func withCode(code int, err error) error { return &codedError{code: code, err: err} }

// usagef is a usage error (exit code 2).
func usagef(format string, args ...any) error {
	return withCode(exitUsage, fmt.Errorf(format, args...))
}

// exitCode maps an error to the exit code it causes. Errors carry their code
// (withCode) where the command knows it; etcd's own errors are classified by
// kind.
func exitCode(err error) int {
	var ee *codedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case isAuthError(err):
		return exitAuth
	case isConnError(err):
		return exitUnreachable
	}
	return exitError
}

// isAuthError reports an authentication or authorisation failure.
func isAuthError(err error) bool {
	if errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrAuthFailed) ||
		errors.Is(err, rpctypes.ErrInvalidAuthToken) || errors.Is(err, rpctypes.ErrAuthOldRevision) {
		return true
	}
	c := grpcCode(err)
	return c == codes.PermissionDenied || c == codes.Unauthenticated
}

// isConnError reports that etcd did not answer in time or could not be
// reached at all.
func isConnError(err error) bool {
	c := grpcCode(err)
	return errors.Is(err, context.DeadlineExceeded) || c == codes.Unavailable || c == codes.DeadlineExceeded
}

// grpcCode is the gRPC code of an error from etcd's client: an etcd error
// (rpctypes.EtcdError) or a gRPC status; codes.Unknown for anything else.
func grpcCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	return status.Code(err)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == guardianArg {
		os.Exit(guardian(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs etcdlock with args and returns its exit code. Errors are printed
// to stderr, each once, prefixed with "etcdlock: ".
func run(args []string, stdout, stderr io.Writer) int {
	root, started := newRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if !*started && code == exitError {
		// cobra's own errors (unknown command, missing arguments) come
		// before any command runs.
		code = exitUsage
	}
	var ee *codedError
	if errors.As(err, &ee) && ee.err == errSilent {
		return code
	}
	fmt.Fprintf(stderr, "etcdlock: %v\n", err)
	if code == exitUsage {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// errSilent is the error of an exit code whose reason was already printed
// (or, for a command's own exit status, needs no message).
var errSilent = errors.New("exit status already reported")

// newRootCommand returns the etcdlock command tree. started is set once a
// subcommand's RunE begins: an error before that is a usage error.
func newRootCommand() (*cobra.Command, *bool) {
	started := new(bool)
	conn := &connFlags{}
	root := &cobra.Command{
		Use:   "etcdlock",
		Short: "Run commands under etcd locks, take part in elections, inspect and break locks",
		Long: `etcdlock runs a command while holding a lock on etcd, takes part in leader
elections, shows who holds a lock and who waits for it, and removes stuck lock
keys. It uses the same keys as etcd's concurrency package, so it excludes
'etcdctl lock' and 'etcdctl elect' on the same names: a lock NAME is the queue
of keys NAME/<lease ID in hex>, held by the key with the smallest create
revision.

` + connHelp + `

Shell completion: 'etcdlock completion bash' (or zsh, fish, powershell)
prints a script; 'etcdlock completion bash --help' says where to put it.

` + exitCodesHelp,
		Example: `  # run a cron job on one host at a time; skip the run if the last one still runs
  */10 * * * * ETCDCTL_ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379 etcdlock lock --try report -- /usr/local/bin/report

  # who holds the lock, who waits
  etcdlock inspect report

  # see the lock at work against an embedded etcd, checked against etcd's history
  etcdlock demo`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       versionText(),
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return conn.applyEnv(cmd.Root().PersistentFlags())
		},
		// A bare "etcdlock" is a mistake (a cron line that lost its
		// subcommand), not a request for help: it must not exit 0.
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return usagef("no command given: lock, elect, inspect, force-unlock, demo or version")
		},
	}
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return withCode(exitUsage, err)
	})
	conn.register(root.PersistentFlags())
	for _, sub := range []*cobra.Command{
		newLockCommand(conn),
		newElectCommand(conn),
		newInspectCommand(conn),
		newForceUnlockCommand(conn),
		newYieldCommand(conn),
		newShardsCommand(conn), // shards.go
		newWorkCommand(conn),   // workqueue.go
		newDemoCommand(conn),
		newVersionCommand(),
	} {
		markStarted(sub, started)
		root.AddCommand(sub)
	}
	return root, started
}

// markStarted makes cmd's RunE, and its subcommands', set started when
// it begins.
func markStarted(cmd *cobra.Command, started *bool) {
	if runE := cmd.RunE; runE != nil {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			*started = true
			return runE(cmd, args)
		}
	}
	for _, sub := range cmd.Commands() {
		markStarted(sub, started)
	}
}

// oneLine shortens s to its first line, for messages that quote etcd values.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + "…"
	}
	return s
}
