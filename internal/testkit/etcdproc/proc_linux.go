package etcdproc

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// ProcAttr puts a child in its own process group, so that a signal to the
// group reaches everything it started, and has the kernel kill it if the
// thread that started it dies, so that a crashed test leaves no server
// behind.
func ProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// WaitStopped waits, for at most d, until every thread of process pid is
// stopped by SIGSTOP, and reports whether they are. kill(2) returns before
// a busy multi-threaded process has stopped, so a caller that pauses a
// process and then expects silence waits for this first.
func WaitStopped(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if allStopped(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// allStopped reads the state of every thread of pid from /proc.
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			return false
		}
		// "pid (comm) S ...": the state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
			return false
		}
	}
	return true
}
