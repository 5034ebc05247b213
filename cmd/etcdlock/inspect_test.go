package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// inspectJSON runs inspect --json on name and decodes its answer.
func inspectJSON(t *testing.T, name string) lockState {
	t.Helper()
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", "--json", name})
	var st lockState
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("inspect --json printed %q: %v", out, err)
	}
	return st
}

// inspect lists the holder and the waiters in queue order, with keys,
// leases, TTLs, create revisions, and who they are and how long they have
// waited when etcdlock wrote the key; keys of other clients show without
// those.
func TestInspect(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)

	st := inspectJSON(t, pfx)
	if st.Holder != nil || len(st.Waiters) != 0 || st.Name != pfx || st.Prefix != pfx+"/" {
		t.Fatalf("inspect of a free lock: %+v", st)
	}
	expectRun(t, 10*time.Second, 0, nil, []string{"inspect", pfx})

	// The holder is this package's Mutex, as any library user's would be;
	// the waiters are etcdlock processes.
	s, err := concurrency.NewSession(c, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var waiters []*proc
	for i := 1; i <= 2; i++ {
		w := start(t, nil, "lock", "--ttl", "20", pfx, "--", "sh", "-c", "echo holding; read line")
		etcdtest.WaitKeys(t, c, pfx, i+1) // queue the next behind this one
		// The waiting message comes after the waiter has written its record.
		w.waitFor(w.stderr, fmt.Sprintf("position %d of %d", i, i))
		waiters = append(waiters, w)
	}
	kvs := etcdtest.WaitKeys(t, c, pfx, 3)

	st = inspectJSON(t, pfx)
	if st.Holder == nil || len(st.Waiters) != 2 {
		t.Fatalf("inspect: %+v, want a holder and 2 waiters", st)
	}
	all := append([]*entryState{st.Holder}, st.Waiters...)
	for i, e := range all {
		kv := kvs[i]
		if e.Key != string(kv.Key) || e.CreateRevision != kv.CreateRevision || e.Lease != fmt.Sprintf("%x", kv.Lease) || e.Position != i {
			t.Errorf("entry %d = %+v, want key %s, create revision %d, lease %x", i, e, kv.Key, kv.CreateRevision, kv.Lease)
		}
		if i > 0 && e.CreateRevision <= all[i-1].CreateRevision {
			t.Errorf("entry %d created at %d after entry %d at %d: not in queue order", i, e.CreateRevision, i-1, all[i-1].CreateRevision)
		}
	}
	if h := st.Holder; h.TTL <= 0 || h.TTL > 30 || h.PID != 0 || h.Waited != nil || h.Held != nil {
		t.Errorf("library holder: %+v, want a TTL in (0, 30] and no etcdlock record", h)
	}
	for i, w := range st.Waiters {
		if w.TTL <= 0 || w.TTL > 20 {
			t.Errorf("waiter %d TTL %d, want (0, 20]", i+1, w.TTL)
		}
		if w.PID != waiters[i].cmd.Process.Pid || w.Host == "" || w.Waited == nil || *w.Waited < 0 || w.Held != nil {
			t.Errorf("waiter %d = %+v, want pid %d, a host, a wait and no hold", i+1, w, waiters[i].cmd.Process.Pid)
		}
	}
	if *st.Waiters[0].Waited < *st.Waiters[1].Waited {
		t.Errorf("the first waiter has waited %vs, less than the second's %vs", *st.Waiters[0].Waited, *st.Waiters[1].Waited)
	}

	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", pfx})
	t.Logf("inspect %s:\n%s", pfx, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "held, 2 waiting") {
		t.Fatalf("inspect printed:\n%s\nwant a title, a header and 3 rows", out)
	}
	for i, kv := range kvs {
		f := strings.Fields(lines[2+i])
		pos := fmt.Sprint(i)
		if i == 0 {
			pos = "holder"
		}
		if len(f) < 9 || f[0] != pos || f[1] != string(kv.Key) || f[4] != fmt.Sprint(kv.CreateRevision) {
			t.Errorf("row %d = %q, want %s %s ... %d", i, lines[2+i], pos, kv.Key, kv.CreateRevision)
		}
	}

	// The first waiter takes over, and inspect shows how long it waited and
	// has held: its record is written before its command starts.
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	waiters[0].waitFor(waiters[0].stdout, "holding")
	st = inspectJSON(t, pfx)
	if h := st.Holder; h == nil || h.Key != string(kvs[1].Key) || h.PID != waiters[0].cmd.Process.Pid || h.Held == nil || h.Waited == nil || h.HeldSince == nil || len(st.Waiters) != 1 {
		t.Fatalf("after the handoff: %+v, want the first waiter holding, with its wait and hold, and one waiter", st)
	}
	for _, w := range waiters {
		w.waitFor(w.stdout, "holding")
		io.WriteString(w.stdin, "done\n")
		w.expectExit(10*time.Second, 0)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// force-unlock with a key that is not in the lock's queue, or with the
// wrong create revision, changes nothing and exits 125.
func TestForceUnlockWrongKey(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	holder, key := holdLock(t, pfx)
	before := etcdtest.WaitKeys(t, c, pfx, 1)[0]
	lease := strings.TrimPrefix(key, pfx+"/")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no such key", []string{"--key", pfx + "/deadbeef"}, "does not exist"},
		{"another lock's key", []string{"--key", pfx + "-other/" + lease}, "not in the lock's queue"},
		{"the name itself", []string{"--key", pfx + "/"}, "not in the lock's queue"},
		{"a key without the name", []string{"--key", lease}, "not in the lock's queue"},
		{"wrong revision", []string{"--key", key, "--rev", fmt.Sprint(before.CreateRevision + 1)}, "written again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectRun(t, 10*time.Second, exitNotFound, nil, append([]string{"force-unlock", pfx}, tc.args...), tc.want, "nothing changed")
			after := etcdtest.Keys(t, c, pfx)
			if len(after) != 1 || string(after[0].Key) != key || after[0].CreateRevision != before.CreateRevision {
				t.Fatalf("keys after a refused force-unlock: %v, want only %s created at %d", after, key, before.CreateRevision)
			}
		})
	}
	expectRun(t, 10*time.Second, exitUsage, nil, []string{"force-unlock", pfx}, "--key")

	select {
	case <-holder.done:
		t.Fatalf("the holder exited after refused force-unlocks: %s", holder.stderr)
	default:
	}
	// The exact key and revision remove it.
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"force-unlock", pfx, "--key", key, "--rev", fmt.Sprint(before.CreateRevision)})
	if !strings.Contains(out, "deleted "+key) {
		t.Errorf("force-unlock printed %q", out)
	}
	holder.expectExit(10*time.Second, exitLost)
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// A cell of inspect's table is one field, and "-" only when empty.
func TestInspectCell(t *testing.T) {
	long := strings.Repeat("é", 45)
	for _, tc := range []struct{ in, want string }{
		{"", "-"},
		{"one", "one"},
		{"-", `"-"`},
		{"two words", `"two words"`},
		{`"x"`, `"\"x\""`},
		{"tab\there", `"tab\there"`},
		{long, strings.Repeat("é", 40) + "..."},
		{"a " + long, `"a ` + strings.Repeat("é", 38) + `"...`},
	} {
		if got := cell(tc.in); got != tc.want {
			t.Errorf("cell(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
