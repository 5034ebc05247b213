package concurrency

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A leader watch that follows a read at revision 10 on a member behind
// it replays events up to 10, which the read has already: A, leader at
// revision 5 and gone at 7. Applying them would report A after B, an
// older leader after a newer one (issue 50); they are skipped, and the
// events after the read are applied.
func TestLeaderWatchSkipsEventsOfItsRead(t *testing.T) {
	var got []string
	w := &leaderWatch{pfx: "e/", keys: make(map[string]LeaderInfo), notify: func(li LeaderInfo) { got = append(got, li.Key) }}
	w.keys["e/b"] = LeaderInfo{Key: "e/b", Rev: 8}
	w.report() // the read's report

	ev := func(typ mvccpb.Event_EventType, key string, create, mod int64) *clientv3.Event {
		return &clientv3.Event{Type: typ, Kv: &mvccpb.KeyValue{Key: []byte(key), CreateRevision: create, ModRevision: mod}}
	}
	replayed := []*clientv3.Event{ev(mvccpb.PUT, "e/a", 5, 5), ev(mvccpb.DELETE, "e/a", 0, 7), ev(mvccpb.PUT, "e/b", 8, 8)}
	if seen := w.apply(replayed[:1], 10); seen != 0 || len(got) != 1 {
		t.Fatalf("an event of revision 5, before the read at 10: seen %d, reports %v; want none", seen, got)
	}
	if seen := w.apply(replayed[1:], 10); seen != 0 || len(got) != 1 {
		t.Fatalf("events of revisions 7 and 8: seen %d, reports %v; want none", seen, got)
	}
	after := []*clientv3.Event{ev(mvccpb.PUT, "e/c", 11, 11), ev(mvccpb.DELETE, "e/b", 0, 12)}
	if seen := w.apply(after, 10); seen != 12 {
		t.Fatalf("events after the read: seen %d, want 12", seen)
	}
	if want := []string{"e/b", "e/c"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("reports %v, want %v", got, want)
	}
}
