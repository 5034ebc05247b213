package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

var (
	demoLockRe = regexp.MustCompile(`contend for lock "([^"]+)"`)
	demoAcqRe  = regexp.MustCompile(`(?m)^\s+\d+\s+\d+\s+\d+\s+\S+\s+etcdlock-demo/\S+$`)
	demoSumRe  = regexp.MustCompile(`acquisitions\s+(\d+) reported by the workers, (\d+) holds in etcd's history`)
)

// checkDemo checks the output of a demo that passed, and returns the lock
// name it used.
func checkDemo(t *testing.T, out string) string {
	t.Helper()
	for _, want := range []string{"etcd 3.", "5 workers", "overlapping holds  0", "keys left          0", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output does not contain %q:\n%s", want, out)
		}
	}
	sum := demoSumRe.FindStringSubmatch(out)
	lines := demoAcqRe.FindAllString(out, -1)
	if sum == nil || sum[1] != sum[2] || sum[1] != fmt.Sprint(len(lines)) || len(lines) < 5 {
		t.Errorf("demo printed %d acquisitions and the summary %q; want the same count, at least one per worker:\n%s", len(lines), sum, out)
	}
	name := demoLockRe.FindStringSubmatch(out)
	if name == nil {
		t.Fatalf("demo did not name its lock:\n%s", out)
	}
	return name[1]
}

// With no flags, the demo starts its own etcd, and passes its check.
func TestDemoEmbedded(t *testing.T) {
	begin(t)
	env := []string{envPrefix + "ENDPOINTS"} // unset, as on a fresh machine
	out, _ := expectRun(t, 60*time.Second, 0, env, []string{"demo", "--duration", "1s"})
	checkDemo(t, out)
	if !strings.Contains(out, "embedded single member at http://127.0.0.1:") {
		t.Errorf("demo did not say it ran on an embedded member:\n%s", out)
	}
}

// With --endpoints, the demo runs against that cluster and leaves no key.
func TestDemoEndpoints(t *testing.T) {
	begin(t)
	c := sharedClient(t)
	out, _ := expectRun(t, 60*time.Second, 0, nil, []string{"--endpoints", strings.Join(shared.endpoints, ","), "demo", "--duration", "1s"})
	name := checkDemo(t, out)
	if !strings.Contains(out, "the cluster at "+strings.Join(shared.endpoints, ",")) {
		t.Errorf("demo did not say it ran on %v:\n%s", shared.endpoints, out)
	}
	etcdtest.WaitKeys(t, c, name, 0)
}

// history builds etcd events: "+key@rev" creates key at rev, "-key@rev"
// deletes it, "=key@rev/created" updates its value.
func history(t *testing.T, pfx string, steps ...string) []*clientv3.Event {
	t.Helper()
	var evs []*clientv3.Event
	for _, s := range steps {
		var key string
		var rev, created int64
		op, rest := s[0], s[1:]
		if op == '=' {
			if _, err := fmt.Sscanf(strings.Replace(strings.Replace(rest, "@", " ", 1), "/", " ", 1), "%s %d %d", &key, &rev, &created); err != nil {
				t.Fatalf("step %q: %v", s, err)
			}
		} else if _, err := fmt.Sscanf(strings.Replace(rest, "@", " ", 1), "%s %d", &key, &rev); err != nil {
			t.Fatalf("step %q: %v", s, err)
		}
		kv := &mvccpb.KeyValue{Key: []byte(pfx + key), ModRevision: rev}
		switch op {
		case '+':
			kv.CreateRevision, kv.Version = rev, 1
			evs = append(evs, &clientv3.Event{Type: mvccpb.PUT, Kv: kv})
		case '=':
			kv.CreateRevision, kv.Version = created, 2
			evs = append(evs, &clientv3.Event{Type: mvccpb.PUT, Kv: kv})
		case '-':
			evs = append(evs, &clientv3.Event{Type: mvccpb.DELETE, Kv: kv})
		}
	}
	return evs
}

// The demo's check finds what is wrong when the workers' claims and etcd's
// history disagree: it is not a check that cannot fail.
func TestVerify(t *testing.T) {
	const pfx = "demo/"
	acq := func(w int, key string, token, at int64) acquisition {
		return acquisition{Worker: w, Key: pfx + key, Token: token, AcquiredRev: at}
	}
	// a and b queue; a holds from 2 to 5, b from 5 to 6; etcdlock's record
	// updates a at 3.
	twoHolds := []string{"+a@2", "=a@3/2", "+b@4", "-a@5", "-b@6"}
	for _, tc := range []struct {
		name     string
		events   []string
		acqs     []acquisition
		overlaps int
		problems []string // one substring per expected problem
	}{
		{"honest", twoHolds, []acquisition{acq(1, "a", 2, 2), acq(2, "b", 4, 5)}, 0, nil},
		{"b acquired while a held", twoHolds, []acquisition{acq(1, "a", 2, 2), acq(2, "b", 4, 4)}, 1,
			[]string{"first in the queue only from revision 5 to 6", "while worker 1 still held"}},
		{"b never released", []string{"+a@2", "+b@3", "-a@4"}, []acquisition{acq(1, "a", 2, 2), acq(2, "b", 3, 4)}, 0,
			[]string{"1 keys were left"}},
		{"a waiter claims the lock", []string{"+a@2", "+b@3", "-b@4", "-a@5"}, []acquisition{acq(1, "a", 2, 2), acq(2, "b", 3, 3)}, 1,
			[]string{"never came first", "while worker 1 still held"}},
		{"wrong token", twoHolds, []acquisition{acq(1, "a", 2, 2), acq(2, "b", 7, 5)}, 0,
			[]string{"never created", "no worker reported"}},
		{"a hold not reported", twoHolds, []acquisition{acq(1, "a", 2, 2)}, 0,
			[]string{"no worker reported"}},
		{"a hold reported twice", twoHolds, []acquisition{acq(1, "a", 2, 2), acq(1, "a", 2, 2), acq(2, "b", 4, 5)}, 1,
			[]string{"reported twice", "while worker 1 still held", "tokens must increase"}},
		// A revoke deletes a and b in one revision: b never held the lock.
		{"keys deleted together", []string{"+a@2", "+b@3", "+c@4", "-a@5", "-b@5", "-c@6"},
			[]acquisition{acq(1, "a", 2, 2), acq(3, "c", 4, 5)}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lives, err := replay(history(t, pfx, tc.events...))
			if err != nil {
				t.Fatal(err)
			}
			v := verify(tc.acqs, lives)
			if v.Overlaps != tc.overlaps {
				t.Errorf("%d overlaps, want %d", v.Overlaps, tc.overlaps)
			}
			if len(v.Problems) != len(tc.problems) {
				t.Fatalf("problems:\n  %s\nwant %d: %q", strings.Join(v.Problems, "\n  "), len(tc.problems), tc.problems)
			}
			for i, want := range tc.problems {
				if !strings.Contains(v.Problems[i], want) {
					t.Errorf("problem %d = %q, want it to say %q", i, v.Problems[i], want)
				}
			}
		})
	}

	// An update of a key created before the history starts means the
	// history is incomplete.
	if _, err := replay(history(t, pfx, "=a@5/2")); err == nil {
		t.Error("replay accepted a history that starts in the middle")
	}
}
