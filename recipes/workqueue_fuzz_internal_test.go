package recipes

import (
	"testing"
)

// FuzzParseRecord: a record another process wrote never panics the
// parser, and what encode writes parses back unchanged.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte("wq1 0 1 \"\"\nvalue"))
	f.Add([]byte("wq1 3 1700000000000000000 \"d\\n\"\n"))
	f.Add([]byte("wq1 -1 0 \"\"\n"))
	f.Add([]byte("wq1 99999999999999999999 0 \"\"\n"))
	f.Add([]byte("wq2 0 0 \"\"\nx"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRecord(b)
		if err != nil {
			return
		}
		if r.base < 0 || r.base > MaxDeliveriesLimit {
			t.Fatalf("base %d out of bounds", r.base)
		}
		back, err := parseRecord([]byte(r.encode()))
		if err != nil || back != r {
			t.Fatalf("round trip of %+v: %+v, %v", r, back, err)
		}
	})
}

// FuzzWorkQueueKeys: the parsers of a queue's keys never panic on a key
// another process wrote.
func FuzzWorkQueueKeys(f *testing.F) {
	q := &WorkQueue{pfx: "q/"}
	f.Add("q/item/00001/0123456789abcdef01234567")
	f.Add("q/delay/00000000000000000001/00001/0123456789abcdef01234567")
	f.Add("q/item/x")
	f.Add("q/delay/")
	f.Fuzz(func(t *testing.T, key string) {
		for _, k := range []string{"item/", "claim/", "dead/", "delay/"} {
			q.idOf([]byte(key), k)
		}
		q.dueOf([]byte(key))
	})
}
