package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// This file is the flag types that follow the habits of timeout(1) and
// flock(1) (issue 31): a duration given in bare seconds, and a signal given
// by name or number.

// secondsValue is a duration flag that takes, as timeout(1) and flock -w
// do, a number of seconds ("10", "0.5") or of days ("2d"), and a Go
// duration ("10s", "1.5m", "1m30s").
type secondsValue time.Duration

// durationVar defines a secondsValue flag name with default value.
func durationVar(f *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var((*secondsValue)(p), name, usage+` (seconds, as "10" or "0.5", or a duration such as 1m30s)`)
}

func (d *secondsValue) Set(s string) error {
	v, err := parseSeconds(s)
	if err != nil {
		return err
	}
	*d = secondsValue(v)
	return nil
}

func (d *secondsValue) String() string { return time.Duration(*d).String() }

func (d *secondsValue) Type() string { return "duration" }

// decimal is a number of seconds or days as timeout(1) takes it.
var decimal = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$`)

// parseSeconds parses a secondsValue.
func parseSeconds(s string) (time.Duration, error) {
	num, unit := s, time.Second
	if d, ok := strings.CutSuffix(s, "d"); ok {
		num, unit = d, 24*time.Hour
	}
	if decimal.MatchString(num) {
		f, err := strconv.ParseFloat(num, 64)
		if d := f * float64(unit); err != nil || math.Abs(d) >= math.MaxInt64 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return time.Duration(f * float64(unit)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a number of seconds nor a duration such as 10s or 1m30s", s)
	}
	return d, nil
}

// signalValue is a signal flag that takes, as timeout -s and kill -s do, a
// signal's name, with or without "SIG", in any case ("TERM", "sigint"), or
// its number ("9").
type signalValue syscall.Signal

func (v *signalValue) Set(s string) error {
	sig, err := parseSignal(s)
	if err != nil {
		return err
	}
	*v = signalValue(sig)
	return nil
}

func (v *signalValue) String() string { return signalName(syscall.Signal(*v)) }

func (v *signalValue) Type() string { return "signal" }

// parseSignal parses a signalValue.
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || unix.SignalName(syscall.Signal(n)) == "" {
			return 0, fmt.Errorf("%d is not a signal number", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("%q is not a signal name (TERM, INT, HUP, KILL, USR1...) or number", s)
}

// stopSignals are the names that shell completion offers for --signal.
var stopSignals = []string{"TERM", "HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "KILL"}

// completeSignal completes the value of --signal with the names of
// stopSignals that begin with what is typed (case and "SIG" aside).
func completeSignal(_ *cobra.Command, _ []string, typed string) ([]string, cobra.ShellCompDirective) {
	typed = strings.TrimPrefix(strings.ToUpper(typed), "SIG")
	var names []string
	for _, n := range stopSignals {
		if strings.HasPrefix(n, typed) {
			names = append(names, n)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// exitCodeValue is an exit code flag: 0 to 255.
type exitCodeValue int

func (v *exitCodeValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 255 {
		return fmt.Errorf("%q is not an exit code from 0 to 255", s)
	}
	*v = exitCodeValue(n)
	return nil
}

func (v *exitCodeValue) String() string { return strconv.Itoa(int(*v)) }

func (v *exitCodeValue) Type() string { return "code" }
