package lockbench

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"
)

// The pairs alternate ABBA, and each window lands on its own side.
func TestInterleaveOrder(t *testing.T) {
	var ran []string
	ps, err := Interleave(context.Background(), 4, Ours, Etcd, func(_ context.Context, impl Impl, i int) (Window, error) {
		ran = append(ran, impl.Name)
		ops := 100 + i
		if impl.Name == Etcd.Name {
			ops = 200 + i
		}
		return Window{Ops: ops, Elapsed: time.Second}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ours", "etcd", "etcd", "ours", "ours", "etcd", "etcd", "ours"}
	if !slices.Equal(ran, want) {
		t.Fatalf("order %v, want %v", ran, want)
	}
	for i, p := range ps {
		if p.Ours.Ops != 100+i || p.Etcd.Ops != 200+i || p.OursFirst != (i%2 == 0) {
			t.Fatalf("pair %d = %+v", i, p)
		}
	}
}

// The ratio is the geometric mean of the per-pair ratios; its t-interval
// and its bootstrap interval hold it, and shrink as the pairs agree more.
func TestRatios(t *testing.T) {
	pairs := func(ratios ...float64) []Pair {
		var ps []Pair
		for _, x := range ratios {
			ps = append(ps, Pair{Ours: Window{Ops: int(1000 * x), Elapsed: time.Second}, Etcd: Window{Ops: 1000, Elapsed: time.Second}})
		}
		return ps
	}
	perSec := Window.PerSec

	// 0.5 and 2 have a geometric mean of 1.
	r := Ratios(pairs(0.5, 2, 0.5, 2), perSec)
	if r.N != 4 || math.Abs(r.Geo-1) > 1e-9 || r.Min != 0.5 || r.Max != 2 {
		t.Fatalf("Ratios = %+v, want N 4, Geo 1, Min 0.5, Max 2", r)
	}
	// By hand: logs ±ln 2, sd = ln 2·√(4/3), t(3) = 3.182.
	half := 3.182 * math.Ln2 * math.Sqrt(4.0/3) / 2
	if math.Abs(r.Hi-math.Exp(half)) > 1e-9 || math.Abs(r.Lo-math.Exp(-half)) > 1e-9 {
		t.Fatalf("t-interval [%v, %v], want [%v, %v]", r.Lo, r.Hi, math.Exp(-half), math.Exp(half))
	}
	if !(r.BootLo <= 1 && r.BootHi >= 1 && r.BootLo >= 0.5 && r.BootHi <= 2) {
		t.Fatalf("bootstrap interval [%v, %v] does not hold 1 within [0.5, 2]", r.BootLo, r.BootHi)
	}

	tight := Ratios(pairs(0.9, 0.91, 0.89, 0.9, 0.92, 0.88, 0.9, 0.9), perSec)
	if !(tight.Lo < 0.9 && tight.Hi > 0.9 && tight.Hi-tight.Lo < 0.03 && tight.Hi < 1) {
		t.Fatalf("tight pairs: %+v, want an interval under 1 around 0.9", tight)
	}
	if again := Ratios(pairs(0.9, 0.91, 0.89, 0.9, 0.92, 0.88, 0.9, 0.9), perSec); again != tight {
		t.Fatalf("the same pairs gave %+v, then %+v", tight, again)
	}

	// A pair with an empty side is left out.
	ps := append(pairs(1.5), Pair{Ours: Window{Ops: 10, Elapsed: time.Second}})
	if r := Ratios(ps, perSec); r.N != 1 || r.Geo != 1.5 || r.Lo != 1.5 || r.Hi != 1.5 {
		t.Fatalf("one pair: %+v", r)
	}
	if r := Ratios(nil, perSec); r != (Ratio{}) {
		t.Fatalf("no pair: %+v", r)
	}
}

func TestTQuantile(t *testing.T) {
	for _, c := range []struct {
		df   int
		want float64
	}{{1, 12.706}, {9, 2.262}, {30, 2.042}, {40, 2.021}, {60, 2.000}, {120, 1.980}} {
		if got := tQuantile975(c.df); math.Abs(got-c.want) > 0.002 {
			t.Errorf("t(%d) = %.4f, want %.3f", c.df, got, c.want)
		}
	}
}
