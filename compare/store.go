package compare

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/seed-a9d410c6/concurrency"
)

// Store is the protected store of one fault run, served to the worker
// processes over HTTP on 127.0.0.1. It holds the two resources of the
// safety workloads:
//
//   - "ctr", the guarded counter: a holder reads it, adds one and writes it
//     back. A write whose read is older than the counter's current value
//     overwrote updates: those are lost updates.
//   - "res", the external resource: a holder begins and ends its use of
//     it. A begin while another holder's use is open is an overlapping
//     hold.
//
// When fenced, every read, write, begin and end passes its token through a
// concurrency.Fence: a token older than the newest seen is refused, and a
// newer token ends, for the resource, every open use with an older one.
type Store struct {
	Fenced bool

	srv   *http.Server
	ln    net.Listener
	start time.Time
	holds chan string // clients that just began a hold, for the nemesis

	mu     sync.Mutex // guards everything below
	phase  string
	fence  concurrency.Fence
	ctr    int64
	uses   map[string]use // open uses of res by client
	counts Counts
	events []string
}

type use struct {
	token int64
	at    time.Duration
	stale bool // fenced out by a newer token
}

// Counts are the figures of one run.
type Counts struct {
	Acquisitions int // holds begun, both workloads
	Writes       int // counter writes accepted
	Lost         int // counter updates overwritten
	Overlaps     int // res begins that found another use open
	Refused      int // operations the fence (or etcd's guarded Txn) refused
	TxnCommitted int // guarded-Txn counter writes that etcd committed
}

// NewStore starts a store on a free loopback port.
func NewStore(fenced bool) (*Store, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Store{Fenced: fenced, ln: ln, start: time.Now(), holds: make(chan string, 64), uses: map[string]use{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// URL is the store's base URL.
func (s *Store) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the server.
func (s *Store) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	s.srv.Close()
}

// Holds delivers the name of each client that begins a hold (dropping
// names while nobody reads).
func (s *Store) Holds() <-chan string { return s.holds }

// Phase labels the events recorded from now on with the fault under way.
func (s *Store) Phase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// Result returns the counts and the violation events.
func (s *Store) Result() (Counts, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts, append([]string(nil), s.events...)
}

// Counter is the counter's value.
func (s *Store) Counter() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctr
}

func (s *Store) eventf(format string, args ...any) {
	t := time.Since(s.start).Seconds()
	s.events = append(s.events, fmt.Sprintf("t=%.2fs [%s] ", t, s.phase)+fmt.Sprintf(format, args...))
}

func (s *Store) began(client string) {
	s.counts.Acquisitions++
	select {
	case s.holds <- client:
	default:
	}
}

func (s *Store) handle(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	op, client := q.Get("op"), q.Get("c")
	token, _ := strconv.ParseInt(q.Get("t"), 10, 64)
	read, _ := strconv.ParseInt(q.Get("r"), 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Since(s.start)
	check := func(res string) bool {
		if !s.Fenced {
			return true
		}
		if err := s.fence.Check(res, token); err != nil {
			s.counts.Refused++
			http.Error(w, err.Error(), http.StatusConflict)
			return false
		}
		return true
	}
	switch op {
	case "read": // counter, begins a hold
		s.began(client)
		if !check("ctr") {
			return
		}
		fmt.Fprint(w, s.ctr)
	case "write":
		if !check("ctr") {
			return
		}
		if read < s.ctr {
			s.counts.Lost += int(s.ctr - read)
			s.eventf("lost update: %s (token %d) wrote %d over %d, having read %d", client, token, read+1, s.ctr, read)
		}
		s.counts.Writes++
		s.ctr = read + 1
		fmt.Fprint(w, s.ctr)
	case "hold": // a guarded-Txn hold begins; the counter is in etcd
		s.began(client)
	case "txn": // its outcome
		if q.Get("ok") == "1" {
			s.counts.TxnCommitted++
		} else {
			s.counts.Refused++
		}
	case "begin":
		s.began(client)
		if !check("res") {
			delete(s.uses, client)
			return
		}
		overlap := ""
		for c, u := range s.uses {
			if c == client {
				continue
			}
			if s.Fenced && u.token < token {
				u.stale = true
				s.uses[c] = u
				continue
			}
			if !u.stale && overlap == "" {
				overlap = fmt.Sprintf("%s (token %d, began t=%.2fs)", c, u.token, u.at.Seconds())
			}
		}
		if overlap != "" {
			s.counts.Overlaps++
			s.eventf("overlap: %s (token %d) began while %s was still using the resource", client, token, overlap)
		}
		s.uses[client] = use{token: token, at: now}
	case "end":
		delete(s.uses, client)
		if !check("res") {
			return
		}
	default:
		http.Error(w, "bad op", http.StatusBadRequest)
	}
}
