package loopback

import (
	"net"
	"strconv"
	"testing"
)

// Ports are distinct, free, and below the kernel's ephemeral range where
// it can be read.
func TestPorts(t *testing.T) {
	ps, err := Ports(6)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := belowEphemeral()
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ps)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Errorf("port %d outside [%d, %d), below the ephemeral range", p, lo, hi)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}
