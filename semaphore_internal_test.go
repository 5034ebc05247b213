package concurrency

import "testing"

// limitRange holds the values of its limit, of every weight, and none of
// another limit's: limits that share leading digits (1, 10, 100), that
// differ in their last digit (19, 20) or in length (9, 10; 999, 1000).
func TestSemaphoreWeightedLimitRange(t *testing.T) {
	var lims []int
	for l := 1; l <= 120; l++ {
		lims = append(lims, l)
	}
	lims = append(lims, 199, 200, 201, 999, 1000, 1001, 1009, 1010, 9999, 10000, 10001)
	vals := func(l int) []string {
		vs := []string{semValue(l, 1)}
		for _, w := range []int{2, 3, 9, 10, 11, l - 1, l} {
			if w > 1 && w <= l {
				vs = append(vs, semValue(l, w))
			}
		}
		return vs
	}
	for _, lim := range lims {
		lo, hi := limitRange(lim)
		for _, l := range lims {
			for _, v := range vals(l) {
				if in := v > lo && v < hi; in != (l == lim) {
					t.Fatalf("limit %d: value %q (limit %d) in range (%q, %q) = %v", lim, v, l, lo, hi, in)
				}
			}
		}
	}
}
