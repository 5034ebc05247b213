// Package loopback picks loopback TCP ports for the etcd members that the
// tools and tests of this module start.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// Ports returns n distinct loopback TCP ports that were free a moment ago:
// each is held open until all n are chosen, then released for the caller.
//
// They are picked at random below the kernel's range of ephemeral ports
// (ip_local_port_range), not by listening on port 0, which picks from
// that range: a member that is stopped and started again (a restart, a
// kill) leaves its port free meanwhile, and on a machine with many
// clients the kernel may give it to an outgoing connection, so that the
// member cannot listen again ("address already in use"). Where the range
// cannot be read, or leaves too few ports below it, the kernel picks.
func Ports(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	lo, hi := belowEphemeral()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if hi-lo > 1000 && tries < 100*n {
			addr = fmt.Sprintf("127.0.0.1:%d", lo+rand.N(hi-lo))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: pick another
			}
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// belowEphemeral returns the ports [lo, hi) from 10000 up to the first
// ephemeral port, or lo == hi if the range is unknown.
func belowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var first, last int
	if _, err := fmt.Sscan(string(b), &first, &last); err != nil || first <= 10000 {
		return 0, 0
	}
	return 10000, first
}
