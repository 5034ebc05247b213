// Package loopback picks loopback TCP ports for the etcd members that the
// tools and tests of this module start.
package loopback

import "net"

// Ports returns n distinct loopback TCP ports that were free a moment ago:
// each is held open until all n are chosen, then released for the caller.
func Ports(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
