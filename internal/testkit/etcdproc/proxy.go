package etcdproc

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy on a loopback port in front of one etcd member.
// Between a client and its member it can delay every byte, drop every
// connection, or blackhole the traffic (accept and read, deliver nothing),
// which cuts that client off from the cluster while the cluster itself is
// healthy.
type Proxy struct {
	ln     net.Listener
	target string // host:port

	mu     sync.Mutex // guards mode, delay, links, closed
	mode   proxyMode
	delay  time.Duration
	links  map[*link]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and every link's goroutines
}

type proxyMode int

const (
	pass      proxyMode = iota
	blackhole           // read from both sides, deliver nothing
	refuse              // close every connection, new ones at once
)

// NewProxy starts a proxy on 127.0.0.1 to target, a URL such as a
// Member's ClientURL or a host:port.
func NewProxy(target string) (*Proxy, error) {
	host, err := hostPort(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: host, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL is the proxy's address as a client endpoint.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Delay delivers every chunk of data, in both directions, d later than it
// was read. Delay(0) stops delaying.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Blackhole keeps connections open and accepts new ones, but delivers
// nothing in either direction: the client sees a member that never
// answers, as behind a network partition.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = blackhole
}

// Drop closes every connection and, until Heal, closes new ones as soon as
// they are accepted.
func (p *Proxy) Drop() {
	p.mu.Lock()
	p.mode = refuse
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Heal ends Blackhole, Drop and Delay. Connections that were blackholed
// lost bytes mid-stream, so they are closed too; clients reconnect.
func (p *Proxy) Heal() {
	p.mu.Lock()
	var links []*link
	if p.mode == blackhole {
		links = p.takeLinks()
	}
	p.mode, p.delay = pass, 0
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Close stops the proxy, closes every connection, and waits for its
// goroutines to return.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
}

// takeLinks empties links and returns what it held. Call with mu held.
func (p *Proxy) takeLinks() []*link {
	var out []*link
	for l := range p.links {
		out = append(out, l)
		delete(p.links, l)
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		if mode == refuse {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// link is one proxied connection.
type link struct {
	once         sync.Once
	client, peer net.Conn
}

func (l *link) close() {
	l.once.Do(func() {
		l.client.Close()
		if l.peer != nil {
			l.peer.Close()
		}
	})
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	peer, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close() // the member is down: the client sees a reset
		return
	}
	l := &link{client: c, peer: peer}
	p.mu.Lock()
	if p.mode == refuse || p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, peer, c) }()
	go func() { defer wg.Done(); p.pump(l, c, peer) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// chunk is data read at one moment, to be delivered at another.
type chunk struct {
	b  []byte
	at time.Time
}

// pump copies from src to dst, applying the proxy's mode to each chunk as
// it is read. A writer goroutine delivers chunks at their due time, so that
// a delay adds latency without limiting throughput. Either side failing
// closes the whole link.
func (p *Proxy) pump(l *link, dst, src net.Conn) {
	defer l.close()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer l.close()
		for c := range q {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				for range q { // drain, so that the reader never blocks
				}
				return
			}
		}
	}()
	defer func() {
		close(q)
		<-done
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			mode, delay := p.mode, p.delay
			p.mu.Unlock()
			if mode == pass {
				q <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(delay)}
			}
		}
		if err != nil {
			return
		}
	}
}

// hostPort returns the host:port of a URL such as http://127.0.0.1:2379,
// or target itself if it has no scheme.
func hostPort(target string) (string, error) {
	for _, scheme := range []string{"http://", "https://", "unix://"} {
		if len(target) > len(scheme) && target[:len(scheme)] == scheme {
			target = target[len(scheme):]
		}
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return "", fmt.Errorf("etcdproc: proxy target %q: %w", target, err)
	}
	if target == "" {
		return "", errors.New("etcdproc: empty proxy target")
	}
	return target, nil
}
