// Package historycheck records what the clients of a fault test did and
// checks it, after the run, against what etcd and the external store
// recorded: that lock holds never overlap by etcd revision and follow
// create-revision order, that guarded and fenced updates were neither lost
// nor doubled, that every call returned, and that nothing was left behind.
//
// A history is a file of JSON lines, one Op each, written by one client
// process (Writer); a client's operations are sequential, so that each
// invoke is followed by its own completion. What etcd saw comes from a
// watch on the lock prefixes (KeyEvent), and what the fenced store saw from
// its accept log (StoreWrite).
package historycheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Types of Op.
const (
	Invoke = "invoke" // the call started
	OK     = "ok"     // it succeeded
	Fail   = "fail"   // it definitely failed: it had no effect
	Info   = "info"   // its outcome is unknown (a time-out, a lost answer)
)

// Functions of Op.
const (
	FSession  = "session"  // NewSession; Lease is the new lease
	FLock     = "lock"     // Mutex.Lock; on ok, Key, Token and Rev (header of the read that showed it held)
	FUnlock   = "unlock"   // Mutex.Unlock
	FIncr     = "incr"     // guarded increment through Mutex.Txn; Value written, Rev of the commit
	FRead     = "read"     // read of the external store; Value read
	FWrite    = "write"    // write to the external store; Value written
	FCampaign = "campaign" // Election.Campaign; on ok, Key, Token (Election.Rev) and Rev
	FResign   = "resign"   // Election.Resign
	FLeader   = "leader"   // Election.Leader; on ok, Key and Token of the leader, Rev of the read
	FHeld     = "held"     // the end of a hold of the hold workload: ok when its Ctx ended (Err: the cause), info when it gave up
	FEnq      = "enqueue"  // recipes Queue or PriorityQueue Enqueue; ID is the value
	FDeq      = "dequeue"  // Dequeue; on ok, ID is the value taken; info: ErrClaimUnknown with the value
	FSlot     = "slot"     // claim of a permit slot (semaphore workload); on ok, Value is the slot
	FStuck    = "stuck"    // a client did not return in time after the run ended
	FLeak     = "leak"     // goroutines of the library were left after everything closed
	FExit     = "exit"     // the process finished its run and cleaned up
)

// Op is one entry of a history.
type Op struct {
	Type     string `json:"type"`
	F        string `json:"f"`
	Workload string `json:"wl,omitempty"`
	Proc     int    `json:"proc"`
	Client   string `json:"client"`
	Lease    int64  `json:"lease,omitempty"`
	Key      string `json:"key,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Rev      int64  `json:"rev,omitempty"`
	Value    int64  `json:"value,omitempty"`
	ID       string `json:"id,omitempty"`
	Time     int64  `json:"time"` // wall clock, Unix nanoseconds
	Err      string `json:"err,omitempty"`
}

// Writer appends Ops to a history as JSON lines. It is safe for use by
// several goroutines.
type Writer struct {
	mu  sync.Mutex // guards w, err
	w   *bufio.Writer
	err error
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Record stamps op with the current wall-clock time and appends it.
func (w *Writer) Record(op Op) {
	op.Time = time.Now().UnixNano()
	b, err := json.Marshal(op)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		_, err = w.w.Write(append(b, '\n'))
	}
	if err != nil && w.err == nil {
		w.err = err
	}
}

// Flush writes out what is buffered and returns the first error so far.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.w.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// ReadFile reads a history written by a Writer. A last line cut short (the
// process was killed mid-write) is an error.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []Op
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("historycheck: %s:%d: %w", path, n, err)
		}
		ops = append(ops, op)
	}
	return ops, sc.Err()
}
