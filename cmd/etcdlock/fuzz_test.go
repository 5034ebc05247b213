package main

import (
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Fuzz targets of the flags that scripts write (issue 40): durations in
// seconds, days or Go's syntax, and signals by name or number. Seeds are
// in testdata/fuzz/<target>; CI runs each briefly (.ci/fuzz.sh).

func FuzzParseSeconds(f *testing.F) {
	f.Add("1m30s")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseSeconds(s)
		if err != nil {
			return
		}
		num, unit := s, time.Second
		if n, ok := strings.CutSuffix(s, "d"); ok {
			num, unit = n, 24*time.Hour
		}
		if decimal.MatchString(num) {
			// A number of seconds or days: within a nanosecond per unit
			// of the exact value, and never wrapped around.
			x, _ := strconv.ParseFloat(num, 64)
			want := x * float64(unit)
			if math.Abs(float64(d)-want) > math.Max(1, math.Abs(want)*1e-15) {
				t.Fatalf("parseSeconds(%q) = %v (%d ns), want about %g ns", s, d, int64(d), want)
			}
		}
		// What the flag prints (time.Duration's String) reads back as
		// the same duration.
		if back, err := parseSeconds(d.String()); err != nil || back != d {
			t.Fatalf("parseSeconds(%q) = %v, which reads back as %v, %v", s, d, back, err)
		}
	})
}

func FuzzParseSignal(f *testing.F) {
	f.Add("TERM")
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := parseSignal(s)
		if err != nil {
			return
		}
		if sig <= 0 || unix.SignalName(sig) == "" {
			t.Fatalf("parseSignal(%q) = %d, which is no signal", s, int(sig))
		}
		// What the flag prints (its name) reads back as the same signal.
		v := signalValue(sig)
		if back, err := parseSignal(v.String()); err != nil || back != sig {
			t.Fatalf("parseSignal(%q) = %v, printed %q, which reads back as %v, %v", s, sig, v.String(), back, err)
		}
		if n, err := strconv.Atoi(s); err == nil && syscall.Signal(n) != sig {
			t.Fatalf("parseSignal(%q) = %d", s, int(sig))
		}
	})
}
