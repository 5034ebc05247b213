package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// journal is a command that appends "+" to the file $J when it starts and
// "-" before it exits, after a line on stdin, and prints what printEnv
// prints in between.
const journal = `echo + >> "$J"; ` + printEnv + `; read line; echo - >> "$J"`

// maxRunning reads a journal file and returns how many commands ran at
// once at most, and how many started.
func maxRunning(t *testing.T, path string) (most, started int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Fields(string(b)) {
		switch l {
		case "+":
			n++
			started++
		case "-":
			n--
		}
		most = max(most, n)
	}
	return most, started
}

// waitStarted polls the journal until n commands have started.
func waitStarted(t *testing.T, path string, n int) {
	t.Helper()
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		_, started := maxRunning(t, path)
		return started >= n
	}, "want %d commands started in %s", n, path)
}

// running returns the processes of ps whose command has printed its line.
func running(ps []*proc) []*proc {
	var r []*proc
	for _, p := range ps {
		if p.stdout.String() != "" {
			r = append(r, p)
		}
	}
	return r
}

// semKeyRe matches a semaphore key after its name's prefix.
var semKeyRe = regexp.MustCompile(`^[0-9a-f]+-[0-9a-f]+$`)

// lock --limit 2: of three commands, two run at once and the third waits
// for one of them to exit; each sees its semaphore key and token, and
// etcd's keys carry the limit.
func TestLockLimit(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	j := filepath.Join(t.TempDir(), "journal")
	env := []string{"J=" + j}

	var ps []*proc
	for i := 1; i <= 3; i++ {
		ps = append(ps, start(t, env, "lock", "--limit", "2", pfx, "--", "sh", "-c", journal))
		etcdtest.WaitKeys(t, c, pfx, i) // in this order in the queue
	}
	waitStarted(t, j, 2)
	kvs := etcdtest.WaitKeys(t, c, pfx, 3)
	for _, kv := range kvs {
		if string(kv.Value) != "2" || !semKeyRe.MatchString(strings.TrimPrefix(string(kv.Key), pfx+"/")) {
			t.Errorf("semaphore key %s = %q, want NAME/<lease>-<seq> = \"2\"", kv.Key, kv.Value)
		}
	}
	// The third in the queue waits, and says so.
	ps[2].waitFor(ps[2].stderr, "position 1 of 1")
	for i, p := range ps[:2] {
		p.waitFor(p.stdout, "\n")
		key, rev := keyRev(t, p.stdout.String())
		if key != string(kvs[i].Key) || rev != kvs[i].CreateRevision {
			t.Errorf("holder %d saw %s %d, want %s %d", i, key, rev, kvs[i].Key, kvs[i].CreateRevision)
		}
	}
	if out := ps[2].stdout.String(); out != "" {
		t.Fatalf("the third command ran while two held permits: %q", out)
	}

	// One holder exits; the waiter runs with the other still running.
	io.WriteString(ps[0].stdin, "done\n")
	ps[0].expectExit(10*time.Second, 0)
	waitStarted(t, j, 3)
	if key, _ := keyRev(t, ps[2].waitFor(ps[2].stdout, "\n")); key != string(kvs[2].Key) {
		t.Errorf("third holder saw key %s, want %s", key, kvs[2].Key)
	}
	for _, p := range ps[1:] {
		io.WriteString(p.stdin, "done\n")
		p.expectExit(10*time.Second, 0)
	}
	if most, started := maxRunning(t, j); most != 2 || started != 3 {
		t.Errorf("journal: at most %d commands at once of %d started, want 2 of 3", most, started)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// --limit below 1 is a usage error; a semaphore name used with another
// limit, or by a plain lock or --shared, is refused with a message that
// says why, and nothing is left in etcd.
func TestLockLimitRefused(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	for _, l := range []string{"0", "-1"} {
		expectRun(t, 10*time.Second, exitUsage, nil, []string{"lock", "--limit", l, pfx, "--", "echo", "ran"}, "--limit must be at least 1")
	}
	expectRun(t, 10*time.Second, exitUsage, nil, []string{"lock", "--limit", "2", "--shared", pfx, "--", "echo", "ran"}, "--limit cannot be used with")
	expectRun(t, 10*time.Second, exitUsage, nil, []string{"lock", "--shared", "--exclusive", pfx, "--", "echo", "ran"}, "cannot be used together")

	holder := start(t, nil, "lock", "--limit", "2", pfx)
	key := holder.firstLine()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "3"}, "another limit"},
		{nil, "use 'lock --limit 2'"},
		{[]string{"--shared"}, "another kind of lock"},
		{[]string{"--exclusive"}, "another kind of lock"},
	} {
		out, _ := expectRun(t, 10*time.Second, exitError, nil, append(append([]string{"lock"}, tc.args...), pfx, "--", "echo", "ran"), tc.want)
		if out != "" {
			t.Errorf("lock %q ran its command: %q", tc.args, out)
		}
		if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 || string(kvs[0].Key) != key {
			t.Fatalf("keys after a refused lock %q: %v, want only %s", tc.args, kvs, key)
		}
	}
	holder.release()
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// lock --limit 3 --weight 2 holds two of the three permits: its key's value
// says so, another --weight 2 is busy while a unit lock fits beside it,
// inspect shows the weights, and bad weights are usage errors that write
// nothing.
func TestLockWeight(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	for _, tc := range []struct{ args []string }{
		{[]string{"--limit", "3", "--weight", "0"}},
		{[]string{"--limit", "3", "--weight", "4"}},
		{[]string{"--weight", "2"}},
	} {
		expectRun(t, 10*time.Second, exitUsage, nil, append(append([]string{"lock"}, tc.args...), pfx, "--", "echo", "ran"), "--weight")
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys after usage errors", n)
	}
	heavy := start(t, nil, "lock", "--limit", "3", "--weight", "2", pfx)
	key := heavy.firstLine()
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 || string(kvs[0].Key) != key || string(kvs[0].Value) != "3/2" {
		t.Fatalf("keys %v, want %s = \"3/2\"", kvs, key)
	}
	expectRun(t, 10*time.Second, exitBusy, nil, []string{"lock", "--try", "--limit", "3", "--weight", "2", pfx, "--", "echo", "ran"}, "busy")
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"lock", "--try", "--limit", "3", pfx, "--", "echo", "ran"})
	if out != "ran\n" {
		t.Fatalf("a unit lock beside weight 2 of 3 printed %q, want ran", out)
	}
	st := inspectJSON(t, pfx)
	if len(st.Holders) != 1 || st.Holders[0].Weight != 2 || st.Holders[0].Limit != 3 {
		t.Fatalf("inspect: %+v, want one holder of weight 2 of limit 3", st.Holders)
	}
	text, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", pfx})
	if !strings.Contains(text, "limit 3): 2 of its permits held by 1 holders") || !strings.Contains(text, "weight=2") {
		t.Fatalf("inspect printed:\n%s", text)
	}
	heavy.release()
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// Two lock --shared run their commands at once; lock --exclusive waits for
// both, and a --shared that comes after it waits for it; plain lock on the
// name is refused and points at --exclusive.
func TestLockSharedExclusive(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	j := filepath.Join(t.TempDir(), "journal")
	env := []string{"J=" + j}

	var readers []*proc
	for i := 1; i <= 2; i++ {
		readers = append(readers, start(t, env, "lock", "--shared", pfx, "--", "sh", "-c", journal))
		etcdtest.WaitKeys(t, c, pfx, i)
	}
	waitStarted(t, j, 2) // both at once: neither has exited
	writer := start(t, env, "lock", "--exclusive", pfx, "--", "sh", "-c", journal)
	etcdtest.WaitKeys(t, c, pfx, 3)
	writer.waitFor(writer.stderr, "and 1 more; position 1 of 1")
	late := start(t, env, "lock", "--shared", pfx, "--", "sh", "-c", journal)
	kvs := etcdtest.WaitKeys(t, c, pfx, 4)
	late.waitFor(late.stderr, "position 2 of 2")
	for i, want := range []string{"/r/", "/r/", "/w/", "/r/"} {
		if !strings.Contains(string(kvs[i].Key), want) {
			t.Errorf("key %d is %s, want a key with %s", i, kvs[i].Key, want)
		}
	}
	if r := running([]*proc{writer, late}); len(r) != 0 {
		t.Fatalf("a waiter ran while two readers held: %q", r[0].stdout)
	}

	expectRun(t, 10*time.Second, exitError, nil, []string{"lock", "--try", pfx, "--", "echo", "ran"}, "lock --exclusive")
	if n := len(etcdtest.Keys(t, c, pfx)); n != 4 {
		t.Fatalf("%d keys after a refused plain lock, want 4", n)
	}

	// The readers exit; the writer runs alone, then the late reader.
	for _, r := range readers {
		io.WriteString(r.stdin, "done\n")
		r.expectExit(10*time.Second, 0)
	}
	waitStarted(t, j, 3)
	if key, _ := keyRev(t, writer.waitFor(writer.stdout, "\n")); key != string(kvs[2].Key) {
		t.Errorf("writer saw key %s, want %s", key, kvs[2].Key)
	}
	if out := late.stdout.String(); out != "" {
		t.Fatalf("a reader ran while the writer held: %q", out)
	}
	io.WriteString(writer.stdin, "done\n")
	writer.expectExit(10*time.Second, 0)
	late.waitFor(late.stdout, "\n")
	io.WriteString(late.stdin, "done\n")
	late.expectExit(10*time.Second, 0)
	if most, started := maxRunning(t, j); most != 2 || started != 4 {
		t.Errorf("journal: at most %d commands at once of %d started, want 2 of 4", most, started)
	}
	// The writer ran alone: "+" "+" "-" "-" "+" "-" "+" "-".
	b, _ := os.ReadFile(j)
	if got := strings.Join(strings.Fields(string(b)), ""); got != "++--+-+-" {
		t.Errorf("journal %q, want ++--+-+- (two readers, then the writer alone, then the late reader)", got)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// inspect shows every kind: a semaphore's holders and waiter with its
// limit, a reader/writer lock's readers and writers, each holding or
// waiting by the rule of its kind.
func TestInspectKinds(t *testing.T) {
	t.Run("semaphore", func(t *testing.T) {
		pfx := begin(t)
		c := sharedClient(t)
		var ps []*proc
		for i := 1; i <= 3; i++ {
			ps = append(ps, start(t, nil, "lock", "--limit", "2", pfx))
			etcdtest.WaitKeys(t, c, pfx, i)
		}
		ps[0].firstLine()
		ps[1].firstLine()
		kvs := etcdtest.WaitKeys(t, c, pfx, 3)
		// The waiting message comes after the waiter has written its times.
		ps[2].waitFor(ps[2].stderr, "position 1 of 1")
		st := inspectJSON(t, pfx)
		if st.Kind != "semaphore" || len(st.Holders) != 2 || len(st.Waiters) != 1 || st.Holder == nil || st.Holder.Key != string(kvs[0].Key) {
			t.Fatalf("inspect: %+v, want a semaphore with 2 holders and 1 waiter", st)
		}
		for i, e := range append(st.Holders, st.Waiters...) {
			if e.Key != string(kvs[i].Key) || e.Kind != "semaphore" || e.Limit != 2 || e.Weight != 1 || e.Holds != (i < 2) || e.CreateRevision != kvs[i].CreateRevision || e.Lease != fmt.Sprintf("%x", kvs[i].Lease) {
				t.Errorf("entry %d = %+v, want %s, a semaphore key of limit 2, holds %v", i, e, kvs[i].Key, i < 2)
			}
			// Who holds comes from the session's owner record: the key's
			// value is the limit.
			if e.PID != ps[i].cmd.Process.Pid || e.Host == "" || e.Label != "etcdlock lock" || e.Value != "2" {
				t.Errorf("entry %d = %+v, want pid %d, a host, label \"etcdlock lock\", value 2", i, e, ps[i].cmd.Process.Pid)
			}
			// Issue 31: how long it waited and held, from the times
			// etcdlock wrote into the owner record.
			if e.Waited == nil || e.WaitingSince == nil || (e.Held != nil) != e.Holds || (e.HeldSince != nil) != e.Holds {
				t.Errorf("entry %d = %+v, want a wait, and a hold if it holds", i, e)
			}
		}
		out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", pfx})
		t.Logf("inspect %s:\n%s", pfx, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 5 || !strings.Contains(lines[0], "limit 2): 2 of its permits held by 2 holders, 1 waiting") {
			t.Fatalf("inspect printed:\n%s", out)
		}
		for i, want := range []string{"holder", "holder", "1"} {
			f := strings.Fields(lines[2+i])
			if f[0] != want || f[1] != string(kvs[i].Key) || f[7] != fmt.Sprint(ps[i].cmd.Process.Pid) || f[len(f)-2] != "semaphore/2" || f[len(f)-1] != "weight=1" {
				t.Errorf("row %d = %q, want %s %s ... pid %d ... semaphore/2 weight=1", i, lines[2+i], want, kvs[i].Key, ps[i].cmd.Process.Pid)
			}
			if waited, held := f[5], f[6]; waited == "-" || (held == "-") == (want == "holder") {
				t.Errorf("row %d = %q: WAITED %s HELD %s, want a wait, and a hold for a holder", i, lines[2+i], waited, held)
			}
		}
		for _, p := range ps {
			p.release()
		}
		etcdtest.WaitKeys(t, c, pfx, 0)
	})
	// Issue 31: election rows have WAITED and HELD too, for a candidate of
	// elect and for the leader of elect with a command (Lead's terms).
	t.Run("election", func(t *testing.T) {
		pfx := begin(t)
		c := sharedClient(t)
		leader := start(t, nil, "elect", pfx, "one", "--", "sh", "-c", "echo leading; read line")
		leader.waitFor(leader.stdout, "leading")
		candidate := start(t, nil, "elect", pfx, "two")
		kvs := etcdtest.WaitKeys(t, c, pfx, 2)
		st := inspectJSON(t, pfx)
		if st.Holder == nil || len(st.Waiters) != 1 {
			t.Fatalf("inspect: %+v, want a leader and a candidate", st)
		}
		l, w := st.Holder, st.Waiters[0]
		if l.Key != string(kvs[0].Key) || l.Value != "one" || l.PID != leader.cmd.Process.Pid || l.Waited == nil || l.Held == nil || l.HeldSince == nil {
			t.Errorf("leader = %+v, want %s, value one, pid %d, a wait and a hold", l, kvs[0].Key, leader.cmd.Process.Pid)
		}
		if w.Key != string(kvs[1].Key) || w.Value != "two" || w.PID != candidate.cmd.Process.Pid || w.Waited == nil || w.Held != nil {
			t.Errorf("candidate = %+v, want %s, value two, pid %d, a wait and no hold", w, kvs[1].Key, candidate.cmd.Process.Pid)
		}
		out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", pfx})
		t.Logf("inspect %s:\n%s", pfx, out)
		io.WriteString(leader.stdin, "done\n")
		leader.expectExit(10*time.Second, 0)
		candidate.firstLine()
		st = inspectJSON(t, pfx)
		if h := st.Holder; h == nil || h.Key != string(kvs[1].Key) || h.Held == nil || h.Waited == nil || *h.Waited < *w.Waited {
			t.Errorf("after the handover: %+v, want the candidate leading, with a hold and a wait of at least %vs", h, *w.Waited)
		}
		candidate.release()
		etcdtest.WaitKeys(t, c, pfx, 0)
	})
	t.Run("rwmutex", func(t *testing.T) {
		pfx := begin(t)
		c := sharedClient(t)
		s, err := concurrency.NewSession(c, concurrency.WithTTL(30))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		rw := concurrency.NewRWMutex(s, pfx)
		if err := rw.RLock(t.Context()); err != nil {
			t.Fatal(err)
		}
		writer := start(t, nil, "lock", "--exclusive", pfx)
		etcdtest.WaitKeys(t, c, pfx, 2)
		reader := start(t, nil, "lock", "--shared", pfx)
		kvs := etcdtest.WaitKeys(t, c, pfx, 3)
		st := inspectJSON(t, pfx)
		if st.Kind != "rwmutex" || len(st.Holders) != 1 || len(st.Waiters) != 2 {
			t.Fatalf("inspect: %+v, want a reader holding, a writer and a reader waiting", st)
		}
		for i, want := range []struct {
			kind  string
			holds bool
			pos   int
		}{{"reader", true, 0}, {"writer", false, 1}, {"reader", false, 2}} {
			e := append(st.Holders, st.Waiters...)[i]
			if e.Key != string(kvs[i].Key) || e.Kind != want.kind || e.Holds != want.holds || e.Position != want.pos {
				t.Errorf("entry %d = %+v, want %s %s holds %v position %d", i, e, want.kind, kvs[i].Key, want.holds, want.pos)
			}
		}
		out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", pfx})
		t.Logf("inspect %s:\n%s", pfx, out)
		if !strings.Contains(out, "held by 1 readers, 2 waiting") || strings.Count(out, " reader  ") != 2 || strings.Count(out, " writer  ") != 1 {
			t.Errorf("inspect printed:\n%s", out)
		}
		if err := rw.RUnlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		writer.firstLine()
		st = inspectJSON(t, pfx)
		if st.Holder == nil || st.Holder.Kind != "writer" || st.Holder.PID != writer.cmd.Process.Pid || len(st.Waiters) != 1 {
			t.Errorf("after the reader left: %+v, want the writer holding, with its record, and a reader waiting", st)
		}
		writer.release()
		reader.firstLine()
		reader.release()
		etcdtest.WaitKeys(t, c, pfx, 0)
	})
}
