package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// groupExitWait bounds the wait, after a loss, for the rest of a command's
// process group once SIGKILL has been sent to it. SIGKILL cannot be caught,
// but a process in uninterruptible sleep dies only when the sleep ends.
const groupExitWait = time.Second

// supervised is a command that runs while a lock or leadership lasts.
//
// The command runs in a process group of its own (unless foreground), so
// that the signals etcdlock sends it reach every process it started, as
// timeout(1) does: a shell's background jobs as well as the shell. Without
// that, `sh -c 'a & b'` would leave a and b running without the lock once
// the shell is stopped (issue 21). A group of its own is a background group
// of the terminal, if there is one: a command that reads the terminal is
// stopped (SIGTTIN) there, and the terminal's ^C reaches etcdlock, which
// passes it on to the group. foreground keeps the command in etcdlock's
// group, where it can use the terminal, at the price of signalling only its
// first process.
type supervised struct {
	command    []string
	env        []string       // variables added to etcdlock's environment
	killGrace  time.Duration  // between stopSignal and SIGKILL once the hold ends
	stopSignal syscall.Signal // sent first once the hold ends; 0 is SIGTERM
	foreground bool           // run in etcdlock's process group; signal the command's process only
	what       string         // what the hold is, for messages: lock "NAME"
}

// run runs the command, passing on signals from sigc to its process group,
// until it exits. If hold ends first, it sends the group stopSignal and,
// after killGrace, SIGKILL, and returns only once the whole group has exited or
// has been sent SIGKILL (and given groupExitWait to die): a process of the
// command that ignores stopSignal does not outlive the hold by more than
// killGrace, even if the command's first process exits before. It returns
// the last signal it passed on, if any, and the command's Wait error (an
// *exec.ExitError for a non-zero status), or a codedError with
// exitNoCommand or exitCannotExec if it did not start.
func (sup supervised) run(hold context.Context, sigc <-chan os.Signal, stdout, stderr io.Writer) (os.Signal, error) {
	command := sup.command
	// The guardian (guardian.go), leader of the command's process group,
	// or the command itself in the foreground.
	c := supervisedCmd(command, sup.foreground)
	// The last of duplicate variables wins: these replace inherited ones.
	c.Env = append(os.Environ(), sup.env...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, stdout, stderr
	if err := startLocked(c); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNoCommand
		}
		return nil, withCode(code, err)
	}
	pid := c.Process.Pid
	// signal sends sig to the command's group, or to its process only.
	signal := func(sig syscall.Signal) {
		if sup.foreground {
			syscall.Kill(pid, sig)
			return
		}
		// The group outlives its first process; its ID is that process's
		// PID, which is not reused while the group has a member.
		syscall.Kill(-pid, sig)
	}
	target := fmt.Sprintf("%s (pid %d)", command[0], pid)
	if !sup.foreground {
		target = fmt.Sprintf("the process group of %s (pgid %d)", command[0], pid)
	}
	waitc := make(chan error, 1)
	go func() { waitc <- c.Wait() }()

	stop := sup.stop()
	var passed os.Signal
	lostc := hold.Done()
	lost, killed := false, false
	var killc <-chan time.Time
	kill := func() {
		killed = true
		signal(syscall.SIGKILL)
	}
	for {
		select {
		case err := <-waitc:
			if lost && !sup.foreground {
				sup.waitGroup(pid, killed, killc, kill, stderr)
			}
			return passed, err
		case sig := <-sigc:
			if s, ok := sig.(syscall.Signal); ok {
				signal(s)
			}
			passed = sig
		case <-lostc:
			lostc, lost = nil, true
			if sup.killGrace == 0 || stop == syscall.SIGKILL {
				fmt.Fprintf(stderr, "etcdlock: lost %s (%v); sending SIGKILL to %s\n", sup.what, context.Cause(hold), target)
				kill()
				continue
			}
			fmt.Fprintf(stderr, "etcdlock: lost %s (%v); sending %s to %s, SIGKILL in %v\n", sup.what, context.Cause(hold), signalName(stop), target, sup.killGrace)
			signal(stop)
			signal(syscall.SIGCONT) // a stopped process acts on a signal only once continued
			t := time.NewTimer(sup.killGrace)
			defer t.Stop()
			killc = t.C
		case <-killc:
			killc = nil
			fmt.Fprintf(stderr, "etcdlock: %s still running %v after %s; sending SIGKILL\n", target, sup.killGrace, signalName(stop))
			kill()
		}
	}
}

// stop is the signal sent first once the hold ends.
func (sup supervised) stop() syscall.Signal {
	if sup.stopSignal == 0 {
		return syscall.SIGTERM
	}
	return sup.stopSignal
}

// waitGroup waits, after a loss, for the members of process group pgid
// that outlived its first process: until none is left, or until killc
// fires, when it calls kill and waits at most groupExitWait more. killed
// says that SIGKILL was sent already.
func (sup supervised) waitGroup(pgid int, killed bool, killc <-chan time.Time, kill func(), stderr io.Writer) {
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	var giveUp <-chan time.Time
	if killed {
		giveUp = time.After(groupExitWait)
	}
	for groupRunning(pgid) {
		select {
		case <-poll.C:
		case <-killc:
			killc = nil
			fmt.Fprintf(stderr, "etcdlock: processes of %s's group (pgid %d) still running %v after %s; sending SIGKILL\n", sup.command[0], pgid, sup.killGrace, signalName(sup.stop()))
			kill()
			giveUp = time.After(groupExitWait)
		case <-giveUp:
			fmt.Fprintf(stderr, "etcdlock: processes of %s's group (pgid %d) still there %v after SIGKILL\n", sup.command[0], pgid, groupExitWait)
			return
		}
	}
}

// groupRunning reports whether a process of group pgid still runs. Zombies
// do not count: an orphan's zombie stays in the group until PID 1 reaps it,
// which some inits (a container's, a VM's) do only every few seconds, or
// never. Where /proc cannot be read, every member counts.
func groupRunning(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false // ESRCH: no member left, not even a zombie
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue // gone since ReadDir
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and
		// parentheses, so the fields are counted after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// checkCommand refuses a command that cannot be run, with the shell's
// codes: 127 if it is not found, 126 if it is found but cannot be executed
// (a directory, no execute permission). lock and elect check before they
// connect, so that a mistyped command exits at once instead of taking a
// place in the queue and running into the error only once the lock is
// held. A name without a slash is looked up in PATH as exec does (where a
// file that is not executable is passed over); a name with one is checked
// as a file. A file that changes between the check and the start still
// fails at the start, with the same codes.
func checkCommand(name string) error {
	_, err := exec.LookPath(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return withCode(exitNoCommand, err)
	}
	return withCode(exitCannotExec, err)
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
