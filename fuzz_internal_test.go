package concurrency

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Fuzz targets of the parsers of what another process wrote to etcd (issue
// 40): a Semaphore key's value, owner and health records, lock-delay
// records and yield requests. Each one checks, besides that nothing
// panics, that what the library writes reads back as written and that
// what it reads is what it could have written. Seeds are in
// testdata/fuzz/<target>; CI runs each briefly (.ci/fuzz.sh).

func FuzzSemValue(f *testing.F) {
	f.Add([]byte(semValue(4, 3)))
	f.Fuzz(func(t *testing.T, v []byte) {
		lim, w, ok := parseSemValue(v)
		if !ok {
			return
		}
		if lim <= 0 || w <= 0 {
			t.Fatalf("parseSemValue(%q) = %d, %d, ok", v, lim, w)
		}
		// Only what semValue writes is accepted (and "L/1", which reads as
		// the weight 1 that it writes as "L"), so that two spellings of a
		// limit cannot both pass the limit guard's byte range.
		if got := semValue(lim, w); got != string(v) && string(v) != got+"/1" {
			t.Fatalf("parseSemValue(%q) = %d, %d, but semValue writes that as %q", v, lim, w, got)
		}
	})
}

// The limit guard compares every value of a name with the byte range of
// its limit (limitRange): the values semValue writes for that limit are
// inside it, those it writes for any other limit outside.
func FuzzSemLimitRange(f *testing.F) {
	f.Add(int64(10), int64(1), int64(1), int64(9))
	f.Fuzz(func(t *testing.T, lim, w, other, ow int64) {
		if lim <= 0 || w <= 0 || other <= 0 || ow <= 0 || int64(int(lim)) != lim || int64(int(other)) != other {
			return
		}
		lo, hi := limitRange(int(lim))
		for _, c := range []struct {
			lim, w int64
		}{{lim, w}, {lim, 1}, {other, ow}, {other, 1}} {
			v := semValue(int(c.lim), int(min(c.w, 1<<31)))
			in := v > lo && v < hi
			if in != (c.lim == lim) {
				t.Fatalf("limitRange(%d) = (%q, %q): %q (limit %d) inside: %v", lim, lo, hi, v, c.lim, in)
			}
		}
	})
}

func FuzzOwnerRecord(f *testing.F) {
	rec, _ := ownerRecord(Owner{Host: "h", PID: 42, Label: "job"})
	f.Add([]byte(rec))
	f.Fuzz(func(t *testing.T, v []byte) {
		var o Owner
		if json.Unmarshal(v, &o) != nil { // readOwners skips these
			return
		}
		_ = o.String()
		rec, err := ownerRecord(o)
		if err != nil {
			return // too long to write: never written
		}
		var back Owner
		if err := json.Unmarshal([]byte(rec), &back); err != nil || back != o {
			t.Fatalf("owner %+v written as %q reads back as %+v, %v", o, rec, back, err)
		}
	})
}

func FuzzHealthRecord(f *testing.F) {
	f.Add(healthKey(0x1f), int64(0x1f), []byte(`{"failures":2,"limit":3,"error":"disk full"}`))
	f.Fuzz(func(t *testing.T, key string, lease int64, v []byte) {
		id, h, ok := parseHealth(&mvccpb.KeyValue{Key: []byte(key), Lease: lease, Value: v})
		if !ok {
			return
		}
		// recordHealth writes healthKey(lease) on that lease: a record read
		// is one it could have written, for the session it names.
		if int64(id) != lease || key != healthKey(id) {
			t.Fatalf("parseHealth(%q on lease %x) = lease %x: not the key recordHealth writes for it (%q)", key, lease, int64(id), healthKey(id))
		}
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, again, ok := parseHealth(&mvccpb.KeyValue{Key: []byte(key), Lease: lease, Value: b}); !ok || *again != *h {
			t.Fatalf("health %+v written as %s reads back as %+v", *h, b, again)
		}
	})
}

// mustDelay and releasedBefore read the same lock-delay record; they must
// agree on what it says.
func FuzzLockDelayRecord(f *testing.F) {
	f.Add([]byte(releasedMark(42)), int64(43), int64(42))
	f.Fuzz(func(t *testing.T, v []byte, rev, behind int64) {
		kvs := []*mvccpb.KeyValue{{Value: v}}
		after, ok := releasedBefore(kvs)
		must := mustDelay(kvs, rev, behind)
		switch {
		case ok && must != (behind > after):
			t.Fatalf("record %q: released after %d, but mustDelay(rev %d, behind %d) = %v", v, after, rev, behind, must)
		case !ok && !must && string(v) != strconv.FormatInt(rev, 10):
			t.Fatalf("record %q records no release, yet mustDelay(rev %d) = false", v, rev)
		}
		if after, ok := releasedBefore([]*mvccpb.KeyValue{{Value: []byte(releasedMark(rev))}}); !ok || after != rev {
			t.Fatalf("releasedMark(%d) reads back as %d, %v", rev, after, ok)
		}
		if mustDelay([]*mvccpb.KeyValue{{Value: []byte(strconv.FormatInt(rev, 10))}}, rev, behind) {
			t.Fatalf("the record of hold %d itself makes it wait", rev)
		}
	})
}

func FuzzYieldRequest(f *testing.F) {
	f.Add([]byte("42"), int64(42))
	f.Fuzz(func(t *testing.T, v []byte, rev int64) {
		if asks([]*mvccpb.KeyValue{{Value: v}}, rev) {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err != nil || n != rev {
				t.Fatalf("asks(%q, %d): a request for another hold", v, rev)
			}
		}
		if !asks([]*mvccpb.KeyValue{{Value: []byte(strconv.FormatInt(rev, 10))}}, rev) {
			t.Fatalf("RequestYield's value for hold %d does not ask it", rev)
		}
		if asks(nil, rev) {
			t.Fatalf("no request asks hold %d", rev)
		}
	})
}
