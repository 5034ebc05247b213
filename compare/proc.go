package compare

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one server or client process that the harness started. Every
// process runs in its own process group and dies with the harness
// (Pdeathsig), so that a crashed run leaves nothing behind.
type Proc struct {
	Name string
	path string
	args []string
	log  string
	env  []string

	mu     sync.Mutex // guards cmd, exited, paused
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// NewProc describes a process; Start runs it, with stdout and stderr
// appended to logPath.
func NewProc(name, logPath, path string, args ...string) *Proc {
	return &Proc{Name: name, path: path, args: args, log: logPath}
}

// Start starts the process, which must not be running.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.exited) {
		return fmt.Errorf("compare: %s is already running", p.Name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "==== compare: start %s at %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if p.env != nil {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("compare: start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	p.cmd, p.exited, p.paused = cmd, exited, false
	return nil
}

// Pid is the process id of the current process, or 0.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.exited) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill sends SIGKILL to the process group (resuming it first if paused) and
// waits for the process to exit. It does nothing when nothing runs.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, exited, paused := p.cmd, p.exited, p.paused
	p.paused = false
	p.mu.Unlock()
	if cmd == nil || closed(exited) {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if paused {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
	}
}

// Pause stops the process group with SIGSTOP and waits until every thread
// of the process has stopped.
func (p *Proc) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.exited) {
		return fmt.Errorf("compare: pause %s: not running", p.Name)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		return err
	}
	p.paused = true
	deadline := time.Now().Add(2 * time.Second)
	for !allStopped(p.cmd.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return nil
}

// Resume continues a paused process group with SIGCONT.
func (p *Proc) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.paused {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	}
	p.paused = false
}

// Wait waits at most d for the process to exit and reports whether it did.
func (p *Proc) Wait(d time.Duration) bool {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return true
	}
	select {
	case <-exited:
		return true
	case <-time.After(d):
		return false
	}
}

// allStopped reports whether every thread of pid is stopped: kill(2)
// returns before a busy multi-threaded process has stopped.
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
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
			return false
		}
	}
	return true
}

func closed(c chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Ports returns n distinct loopback TCP ports that were free a moment ago.
func Ports(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// goBuild runs go build -o out pkg in the current module.
func goBuild(ctx context.Context, out, pkg string) ([]byte, error) {
	return exec.CommandContext(ctx, "go", "build", "-o", out, pkg).CombinedOutput()
}
