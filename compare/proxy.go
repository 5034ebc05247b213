package compare

import (
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 between one client process and one
// server. Blackhole cuts the client off as a network partition would: the
// connections stay open and nothing is delivered either way. Retarget
// points it at another server, as a Sentinel-aware Redis client follows a
// failover.
type Proxy struct {
	ln net.Listener

	mu     sync.Mutex // guards target, hole, conns
	target string
	hole   bool
	conns  map[net.Conn]struct{}

	wg sync.WaitGroup // accept loop and pumps
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole delivers nothing in either direction until Heal; new
// connections are accepted and then hang too.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	p.hole = true
	p.mu.Unlock()
}

// Heal ends Blackhole and closes the connections that lost bytes in it;
// clients reconnect.
func (p *Proxy) Heal() {
	p.mu.Lock()
	was := p.hole
	p.hole = false
	p.mu.Unlock()
	if was {
		p.closeAll()
	}
}

// Retarget sends new connections to target and closes the current ones.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.closeAll()
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.closeAll()
	p.wg.Wait()
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		p.track(c)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			s, err := net.DialTimeout("tcp", target, time.Second)
			if err != nil {
				c.Close()
				return
			}
			p.track(s)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); p.pump(s, c) }()
			go func() { defer wg.Done(); p.pump(c, s) }()
			wg.Wait()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, s)
			p.mu.Unlock()
		}()
	}
}

// pump copies src to dst, discarding what it reads while the proxy is a
// blackhole. Either side failing closes both.
func (p *Proxy) pump(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hole := p.hole
			p.mu.Unlock()
			if !hole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
