package main

import (
	"syscall"
	"testing"
	"time"
)

// Durations as timeout(1) and flock -w take them, and Go's (issue 31).
func TestParseSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"10", 10 * time.Second},
		{"0", 0},
		{"0.5", 500 * time.Millisecond},
		{".25", 250 * time.Millisecond},
		{"1.", time.Second},
		{"-1", -time.Second},
		{"2d", 48 * time.Hour},
		{"0.5d", 12 * time.Hour},
		{"10s", 10 * time.Second},
		{"1.5m", 90 * time.Second},
		{"1m30s", 90 * time.Second},
		{"2h", 2 * time.Hour},
		{"500ms", 500 * time.Millisecond},
	} {
		got, err := parseSeconds(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseSeconds(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "soon", "1x", "NaN", "Inf", "0x10", "1e3", "1_000", "d", "1e400d", "99999999999999"} {
		if got, err := parseSeconds(in); err == nil {
			t.Errorf("parseSeconds(%q) = %v, want an error", in, got)
		}
	}
}

// Signals as timeout -s and kill -s take them.
func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{
		"TERM": syscall.SIGTERM, "SIGTERM": syscall.SIGTERM, "term": syscall.SIGTERM,
		"sighup": syscall.SIGHUP, "KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "9": syscall.SIGKILL, "2": syscall.SIGINT,
	} {
		got, err := parseSignal(in)
		if err != nil || got != want {
			t.Errorf("parseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "999", "FOO", "SIG", "SIGTERM2"} {
		if got, err := parseSignal(in); err == nil {
			t.Errorf("parseSignal(%q) = %v, want an error", in, got)
		}
	}
}

func TestExitCodeValue(t *testing.T) {
	for in, want := range map[string]exitCodeValue{"0": 0, "1": 1, "255": 255} {
		var v exitCodeValue
		if err := v.Set(in); err != nil || v != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, v, err, want)
		}
	}
	for _, in := range []string{"", "-1", "256", "x", "1.5"} {
		var v exitCodeValue
		if err := v.Set(in); err == nil {
			t.Errorf("Set(%q) = %v, want an error", in, v)
		}
	}
}
