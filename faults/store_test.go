package faults_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/seed-a9d410c6/concurrency"
	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// store is the external resource of the fence and unguarded workloads: a
// set of integer values in the test process, served over a unix socket to
// the worker processes. Reads and writes of the "fenced" resource pass
// their token through a concurrency.Fence, reads included, so that a newer
// holder's read shuts out an older holder's later write; the "raw"
// resource, the control, checks nothing. Every accepted write is logged in
// order for the checker.
type store struct {
	srv *http.Server
	ln  net.Listener

	fence concurrency.Fence
	mu    sync.Mutex // guards vals, log; held across check and apply
	vals  map[string]int64
	log   []hc.StoreWrite
}

func startStore(t *testing.T, sock string) *store {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := &store{ln: ln, vals: map[string]int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /read", s.handle(false))
	mux.HandleFunc("POST /write", s.handle(true))
	s.srv = &http.Server{Handler: mux}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		s.srv.Close()
		<-done
	})
	return s
}

func (s *store) handle(write bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		res := q.Get("res")
		token, err1 := strconv.ParseInt(q.Get("token"), 10, 64)
		read, err2 := strconv.ParseInt(q.Get("read"), 10, 64)
		value, err3 := strconv.ParseInt(q.Get("value"), 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil || (res != "fenced" && res != "raw") {
			http.Error(w, fmt.Sprintf("bad request: %v", err), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if res == "fenced" {
			if err := s.fence.Check(res, token); err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
		}
		if write {
			s.vals[res] = value
			s.log = append(s.log, hc.StoreWrite{Resource: res, Fenced: res == "fenced", Token: token,
				Read: read, Value: value, ID: q.Get("id"), Client: q.Get("client")})
		}
		fmt.Fprintln(w, s.vals[res])
	}
}

// writes returns a copy of the accept log.
func (s *store) writes() []hc.StoreWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hc.StoreWrite(nil), s.log...)
}
