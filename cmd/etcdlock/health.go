package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/seed-a9d410c6/concurrency"
)

// healthFlags are lock's and elect's health check (Consul's session
// checks): a shell command run at an interval; after failures in a row,
// the session ends and its lease is revoked, as on a loss.
type healthFlags struct {
	cmd      string
	interval time.Duration
	failures int
}

func (h *healthFlags) add(f *pflag.FlagSet) {
	f.StringVar(&h.cmd, "health-cmd", "", "a shell command run every --health-interval while holding or waiting; after --health-failures failures in a row (exit status not 0, or still running at the next interval) the session ends and its lease is revoked, as on a loss (exit 122)")
	durationVar(f, &h.interval, "health-interval", 10*time.Second, "time between two runs of --health-cmd, and the longest one may take")
	f.IntVar(&h.failures, "health-failures", 3, "failures of --health-cmd in a row that end the session")
}

// validate reports bad health flags, with usage's exit code.
func (h *healthFlags) validate() error {
	switch {
	case h.cmd == "":
		return nil
	case h.interval <= 0:
		return withCode(exitUsage, fmt.Errorf("--health-interval %v: %w", h.interval, concurrency.ErrInvalidHealthCheck))
	case h.failures < 1:
		return withCode(exitUsage, fmt.Errorf("--health-failures %d: %w", h.failures, concurrency.ErrInvalidHealthCheck))
	}
	return nil
}

// check runs the command once, within ctx: its output goes nowhere, and
// a failure says its status and the last line it wrote on stderr.
func (h *healthFlags) check(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", h.cmd)
	cmd.WaitDelay = time.Second // a stray child must not hold the pipe
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		return fmt.Errorf("--health-cmd %q: %w: %s", h.cmd, err, lines[len(lines)-1])
	}
	return nil
}

// sessionOptions is the session option of the health check, if any.
func (h *healthFlags) sessionOptions() []concurrency.SessionOption {
	if h.cmd == "" {
		return nil
	}
	return []concurrency.SessionOption{concurrency.WithHealthCheck(h.interval, h.failures, h.check)}
}

// leadOptions is the Lead option of the health check, if any.
func (h *healthFlags) leadOptions() []concurrency.LeadOption {
	if h.cmd == "" {
		return nil
	}
	return []concurrency.LeadOption{concurrency.WithLeadHealthCheck(h.interval, h.failures, h.check)}
}
