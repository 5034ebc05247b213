package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// This file holds the guardian: how a supervised command dies with its
// etcdlock however etcdlock dies (SIGKILL, the OOM killer, a panic), with
// every process of its group, before the lease that guards it expires
// (issue 49).
//
// The kernel's parent-death signal (Linux's PR_SET_PDEATHSIG, Go's
// SysProcAttr.Pdeathsig) reaches only the direct child, and a command's
// background jobs are its grandchildren. So etcdlock does not start the
// command itself: it starts itself again in guardian mode
// (`etcdlock <guardianArg> PPID -- COMMAND...`) as the leader of a new
// process group, with a parent-death signal, and the guardian starts the
// command in that group. When etcdlock dies, the guardian gets the signal,
// or sees at its next poll (every guardianPoll) that its parent is no
// longer etcdlock, and sends SIGKILL to the whole group, itself included.
// Signals that etcdlock sends the group reach the command directly; the
// guardian catches them, so that it outlives the command, and exits as
// the command did, so that etcdlock sees the command's status.
//
// The parent-death signal fires when the thread that started the child
// exits, not the process (golang/go#27505): etcdlock starts every child
// from one goroutine locked to its thread for the life of the process
// (startLocked), so that thread never exits before the process does; and
// the guardian's poll of its parent covers whatever else could go wrong,
// and is all that other systems, which have no parent-death signal, get.

// guardianArg, as etcdlock's first argument, runs the guardian. It is not
// a command of the CLI: no one types it.
const guardianArg = "__etcdlock_guardian__"

// guardianPoll is how often the guardian checks that its parent lives.
const guardianPoll = 100 * time.Millisecond

// starter is the goroutine that starts every child of etcdlock, locked to
// its OS thread, which it never unlocks: the thread lives as long as the
// process, so a child's parent-death signal fires only when etcdlock dies.
// It is started on first use and lives as long as the process.
var starter struct {
	once sync.Once
	reqs chan startRequest
}

type startRequest struct {
	c    *exec.Cmd
	done chan error
}

// startLocked starts c from the starter's thread.
func startLocked(c *exec.Cmd) error {
	starter.once.Do(func() {
		starter.reqs = make(chan startRequest)
		go func() {
			runtime.LockOSThread()
			for r := range starter.reqs {
				r.done <- r.c.Start()
			}
		}()
	})
	done := make(chan error, 1)
	starter.reqs <- startRequest{c: c, done: done}
	return <-done
}

// supervisedCmd returns the process that etcdlock starts for command: the
// guardian, in a new process group, or, in foreground mode (etcdlock's
// own group, where only the command's first process is signalled), the
// command itself. Both get the parent-death signal where the system has
// one: the guardian SIGTERM, which it catches to kill the group; the
// foreground command SIGKILL.
func supervisedCmd(command []string, foreground bool) *exec.Cmd {
	if foreground {
		c := exec.Command(command[0], command[1:]...)
		c.SysProcAttr = &syscall.SysProcAttr{}
		setDeathSignal(c.SysProcAttr, syscall.SIGKILL)
		return c
	}
	args := append([]string{guardianArg, strconv.Itoa(os.Getpid()), "--"}, command...)
	c := exec.Command(selfExe(), args...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(c.SysProcAttr, syscall.SIGTERM)
	return c
}

// guardian is etcdlock in guardian mode, with the arguments after
// guardianArg: PPID -- COMMAND [ARGS...]. It runs the command in its own
// process group until it exits, and returns the exit code that makes
// etcdlock see the command's status; it kills the group, and so itself,
// once its parent is no longer PPID.
func guardian(args []string) int {
	runtime.LockOSThread() // the command's parent-death signal follows this thread; main never returns before exiting
	if len(args) < 3 || args[1] != "--" {
		args = nil
	}
	ppid, err := strconv.Atoi(append(args, "")[0])
	if args == nil || err != nil {
		fmt.Fprintln(os.Stderr, "etcdlock: the guardian mode is for etcdlock's own use")
		return exitUsage
	}
	sigc := make(chan os.Signal, 16)
	signal.Notify(sigc) // every signal: the group's are for the command, which gets them too
	orphaned := func() {
		if os.Getppid() != ppid {
			syscall.Kill(0, syscall.SIGKILL) // the whole group, the guardian included
		}
	}
	orphaned() // etcdlock died before the death signal was set
	c := exec.Command(args[2], args[3:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{}
	setDeathSignal(c.SysProcAttr, syscall.SIGKILL)
	if err := c.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "etcdlock: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNoCommand
		}
		return exitCannotExec
	}
	waitc := make(chan error, 1)
	go func() { waitc <- c.Wait() }()
	tick := time.NewTicker(guardianPoll)
	defer tick.Stop()
	for {
		select {
		case err := <-waitc:
			return exitAs(err)
		case <-sigc:
		case <-tick.C:
		}
		orphaned()
	}
}

// exitAs returns the guardian's exit code for the command's Wait error:
// its code; or, if a signal killed it, the guardian dies of the same
// signal where that is a plain termination, else exits 128+N, which
// etcdlock reports as the same status.
func exitAs(err error) int {
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) {
		return 0
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return ee.ExitCode()
	}
	sig := ws.Signal()
	switch sig {
	case syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM:
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig)
		time.Sleep(time.Second) // the signal ends the process; this is only in case it did not
	}
	return exitSignal + int(sig)
}
