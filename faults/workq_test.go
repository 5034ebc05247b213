package faults_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// The workq workload (faults/worker/workq.go) runs a recipes.WorkQueue
// under every fault: consumers put, take, and end each claim by AckTxn
// (with an effect key), Nack or a crash. It is checked three ways:
//   - by etcd's history (the harness's watch of the queue's keys): every
//     take's token is the creation of a claim key of its item, no claim
//     delivered twice, and every acknowledgement deleted its own claim
//     (it committed while the claim lived);
//   - by the end state: every item put is acknowledged (its effect key
//     exists, written once, by the commit that deleted a claim of its
//     item) or still in the queue (ready, delayed or dead), never both;
//   - by porcupine's at-least-once model (wqModel), per item.

// Functions of the workq history (faults/worker/workq.go).
const (
	fWQPut  = "wqput"
	fWQTake = "wqtake"
	fWQAck  = "wqack"
	fWQNack = "wqnack"
	fWQDrop = "wqdrop"
)

// wqEnd is what the end of the run shows of the workq queue.
type wqEnd struct {
	waiting map[string]string           // item id -> "item", "delay" or "dead"
	effects map[string]*mvccpb.KeyValue // value -> its effect key
	at      int64                       // wall clock of the read, Unix nanoseconds
}

// workqEnd reads the workq queue's items and the effects.
func (r *run) workqEnd(ctx context.Context) wqEnd {
	end := wqEnd{waiting: map[string]string{}, effects: map[string]*mvccpb.KeyValue{}, at: time.Now().UnixNano()}
	name := r.pfx + "/lock/workq/"
	resp, err := r.ctl.Get(ctx, name, clientv3.WithPrefix())
	if err != nil {
		r.t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		kind, rest, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), name), "/")
		if kind == "delay" {
			_, rest, _ = strings.Cut(rest, "/")
		}
		if kind == "item" || kind == "delay" || kind == "dead" {
			end.waiting[rest] = kind
		}
	}
	eresp, err := r.ctl.Get(ctx, r.pfx+"/wqeffect/", clientv3.WithPrefix())
	if err != nil {
		r.t.Fatal(err)
	}
	for _, kv := range eresp.Kvs {
		end.effects[strings.TrimPrefix(string(kv.Key), r.pfx+"/wqeffect/")] = kv
	}
	return end
}

// workqLeft reports whether key, left at the end of a run, is one the
// workq queue may keep: its items, delayed items, dead letters and dedup
// ids (never its claims or waiters, which live on leases).
func workqLeft(pfx, key string) bool {
	rest, ok := strings.CutPrefix(key, pfx+"/lock/workq/")
	kind, _, _ := strings.Cut(rest, "/")
	return ok && (kind == "item" || kind == "delay" || kind == "dead" || kind == "dedup")
}

// claimLife is one incarnation of a claim key.
type claimLife struct{ created, deleted int64 }

// checkWorkQueue checks the workq workload (see the top of this file) and
// returns porcupine's verdicts on its items.
func checkWorkQueue(rep *hc.Report, name string, events []hc.KeyEvent, ops []hc.Op, end wqEnd) []modelVerdict {
	before := rep.Total()
	lives := map[string][]*claimLife{} // item id -> its claim key's lives
	cp := name + "/claim/"
	for _, ev := range events {
		id, ok := strings.CutPrefix(ev.Key, cp)
		if !ok {
			continue
		}
		ls := lives[id]
		switch {
		case !ev.Delete && ev.CreateRev == ev.Rev:
			lives[id] = append(ls, &claimLife{created: ev.Rev})
		case ev.Delete && len(ls) > 0 && ls[len(ls)-1].deleted == 0:
			ls[len(ls)-1].deleted = ev.Rev
		case ev.Delete:
			rep.Violate(hc.Complete, "%s: delete of claim %s at %d with no claim alive", name, id, ev.Rev)
		}
	}
	lifeOf := func(id string, created int64) *claimLife {
		for _, l := range lives[id] {
			if l.created == created {
				return l
			}
		}
		return nil
	}
	idOf := map[string]string{} // value -> item id
	put := map[string]string{}  // value -> ok or info
	acks := map[string]int{}    // value -> acks ok
	used := map[*claimLife]bool{}
	for _, op := range ops {
		switch {
		case op.F == fWQPut && op.Type != hc.Invoke:
			put[op.ID] = op.Type
			if op.Type == hc.OK {
				idOf[op.ID] = op.Key
			}
		case op.F == fWQTake && op.Type == hc.OK:
			idOf[op.ID] = op.Key
			rep.Checked[hc.WorkQueueClaim]++
			l := lifeOf(op.Key, op.Token)
			switch {
			case l == nil:
				rep.Violate(hc.WorkQueueClaim, "%s: %s took %s with token %d, which created no claim", name, op.Client, op.Key, op.Token)
			case used[l]:
				rep.Violate(hc.WorkQueueClaim, "%s: claim %s at %d delivered twice", name, op.Key, op.Token)
			}
			used[l] = true
		case op.F == fWQAck && op.Type == hc.OK:
			acks[op.ID]++
			rep.Checked[hc.WorkQueueClaim]++
			if l := lifeOf(op.Key, op.Token); l == nil || l.deleted != op.Rev {
				rep.Violate(hc.WorkQueueClaim, "%s: ack of %s (token %d) at %d did not end its claim (%+v)", name, op.Key, op.Token, op.Rev, l)
			}
		}
	}
	checkWorkqEnd(rep, name, put, idOf, acks, lives, end)
	vs := checkWorkqModel(rep, name, ops, idOf, end)
	vs[0].found = rep.Total() - before
	return vs
}

// checkWorkqEnd checks the end state: each item put acknowledged once
// (its effect written once, by a commit that ended one of its claims) or
// still in the queue, not both, not neither.
func checkWorkqEnd(rep *hc.Report, name string, put, idOf map[string]string, acks map[string]int, lives map[string][]*claimLife, end wqEnd) {
	for v, how := range put {
		rep.Checked[hc.WorkQueueNoLoss]++
		_, acked := end.effects[v]
		_, waiting := end.waiting[idOf[v]]
		switch {
		case acked && waiting:
			rep.Violate(hc.WorkQueueNoLoss, "%s: %q acknowledged and still in the queue", name, v)
		case !acked && !waiting && (how == hc.OK || idOf[v] != ""):
			rep.Violate(hc.WorkQueueNoLoss, "%s: %q (item %s) put, never acknowledged, not in the queue", name, v, idOf[v])
		}
		if acks[v] > 1 {
			rep.Violate(hc.WorkQueueOnce, "%s: %q acknowledged %d times", name, v, acks[v])
		}
	}
	for v, kv := range end.effects {
		rep.Checked[hc.WorkQueueOnce]++
		if kv.Version != 1 {
			rep.Violate(hc.WorkQueueOnce, "%s: effect of %q written %d times", name, v, kv.Version)
		}
		if _, ok := put[v]; !ok {
			rep.Violate(hc.WorkQueueOnce, "%s: effect of %q, never put", name, v)
		}
		ended := slices.ContainsFunc(lives[idOf[v]], func(l *claimLife) bool { return l.deleted == kv.CreateRevision })
		if !ended {
			rep.Violate(hc.WorkQueueOnce, "%s: effect of %q written at %d, by no commit that ended a claim of item %s", name, v, kv.CreateRevision, idOf[v])
		}
	}
}

// wqIn is an operation of the at-least-once model on one item.
type wqIn struct {
	f     string // fWQPut, fWQTake, fWQAck, fWQNack, fWQDrop, or "end"
	typ   string // hc.OK, hc.Fail or hc.Info
	token int64
	end   string // for "end": "acked", "waiting" or "lost"
}

// wqState is the model's item: put, acknowledged, and the token of its
// latest claim.
type wqState struct {
	put, acked bool
	last       int64
}

// wqModel is at-least-once delivery with fenced acknowledgement, per item:
// a take returns a put, unacknowledged item with a claim newer than any
// before; an ack succeeds only for the latest claim of an unacknowledged
// item, and then no take returns it again; a nack succeeds only for the
// latest claim. Failed calls (ErrClaimLost) and crashes change nothing;
// an ack whose outcome is unknown may have applied. The end of the run
// shows the item acknowledged, or waiting (ready, delayed or dead), never
// lost.
var wqModel = porcupine.Model{
	Init: func() any { return wqState{} },
	Step: func(st, in, _ any) (bool, any) {
		s, i := st.(wqState), in.(wqIn)
		switch {
		case i.f == fWQPut:
			s.put = true
			return true, s
		case i.f == fWQTake:
			ok := s.put && !s.acked && i.token > s.last
			s.last = i.token
			return ok, s
		case i.f == fWQAck && i.typ == hc.OK:
			ok := s.put && !s.acked && s.last == i.token
			s.acked = true
			return ok, s
		case i.f == fWQAck && i.typ == hc.Info:
			if s.put && !s.acked && s.last == i.token {
				s.acked = true
			}
			return true, s
		case i.f == fWQNack && i.typ == hc.OK:
			return s.put && !s.acked && s.last == i.token, s
		case i.f == "end":
			return (i.end == "acked") == s.acked && i.end != "lost" && s.put, s
		}
		return true, s // failed calls, crashes
	},
	Equal: func(a, b any) bool { return a.(wqState) == b.(wqState) },
	DescribeOperation: func(in, _ any) string {
		i := in.(wqIn)
		if i.f == "end" {
			return "end: " + i.end
		}
		return fmt.Sprintf("%s %s token %d", i.f, i.typ, i.token)
	},
}

// checkWorkqModel checks each item's history against wqModel, and returns
// one verdict for all items (each a partition of its own).
func checkWorkqModel(rep *hc.Report, name string, ops []hc.Op, idOf map[string]string, end wqEnd) []modelVerdict {
	byValue := map[string][]porcupine.Operation{}
	clients := map[string]int{}
	for _, c := range hc.Calls(ops) {
		if c.Type == hc.Invoke || !strings.HasPrefix(c.F, "wq") || c.F == fWQDrop || c.ID == "" || (c.F == fWQTake && c.Type != hc.OK) {
			continue
		}
		if _, ok := clients[c.Client]; !ok {
			clients[c.Client] = len(clients)
		}
		ret := c.End
		if c.Type == hc.Info {
			ret = math.MaxInt64 // it may apply at any time after its call
		}
		byValue[c.ID] = append(byValue[c.ID], porcupine.Operation{ClientId: clients[c.Client],
			Input: wqIn{f: c.F, typ: c.Type, token: c.Token}, Call: c.Start, Return: ret})
	}
	var h []porcupine.Operation
	endClient := len(clients)
	for v, vops := range byValue {
		state := "lost"
		if _, ok := end.effects[v]; ok {
			state = "acked"
		} else if _, ok := end.waiting[idOf[v]]; ok {
			state = "waiting"
		}
		if state == "lost" && !slices.ContainsFunc(vops, func(o porcupine.Operation) bool {
			return o.Input.(wqIn).f != fWQPut || o.Return != math.MaxInt64
		}) {
			continue // a put of unknown outcome that did not apply
		}
		vops = append(vops, porcupine.Operation{ClientId: endClient, Input: wqIn{f: "end", end: state}, Call: end.at, Return: end.at + 1})
		for i := range vops {
			vops[i].Input = partitioned{v, vops[i].Input.(wqIn)}
		}
		h = append(h, vops...)
	}
	m := wqModel
	m.Partition = func(h []porcupine.Operation) [][]porcupine.Operation {
		parts := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(partitioned).key
			parts[k] = append(parts[k], op)
		}
		var out [][]porcupine.Operation
		for _, p := range parts {
			out = append(out, p)
		}
		return out
	}
	step, describe := m.Step, m.DescribeOperation
	m.Step = func(st, in, out any) (bool, any) { return step(st, in.(partitioned).in, out) }
	m.DescribeOperation = func(in, out any) string { return in.(partitioned).key + " " + describe(in.(partitioned).in, out) }
	start := time.Now()
	res := hc.CheckModel(rep, name, "at-least-once delivery", m, h, *flagModelTimeout)
	return []modelVerdict{{name: "workq", model: "at-least-once delivery", ops: len(h), result: res, took: time.Since(start), m: m, h: h}}
}

// partitioned is a model input tagged with its item.
type partitioned struct {
	key string
	in  wqIn
}

var flagWorkqDuration = flag.Duration("faults.workqduration", 60*time.Second, "how long TestFaultsWorkQueue runs the workq workload under faults")

// TestFaultsWorkQueue runs the workq workload alone (a recipes.WorkQueue:
// put, take, AckTxn with an effect, Nack, crash) on a 3-process cluster
// while the nemesis injects every fault kind, and checks it as the top of
// this file says. TestFaults runs the workload too, among the others.
func TestFaultsWorkQueue(t *testing.T) {
	pfx := etcdtest.Begin(t)
	etcd, worker := binaries(t)
	cfg := runConfig{
		etcd:      etcd,
		etcdArgs:  []string{"--unsafe-no-fsync"},
		worker:    worker,
		duration:  *flagWorkqDuration,
		procs:     *flagProcs,
		clients:   *flagClients,
		ttl:       *flagTTL,
		workloads: []string{"workq"},
		faults:    allFaults,
	}
	res := runWith(t, pfx, cfg)
	for _, f := range []string{"wqtake ok", "wqack ok", "wqnack ok"} {
		if n := res.ops["workq: "+f]; n < 10 {
			t.Errorf("workload workq: only %d %s in %v", n, f, res.elapsed)
		}
	}
	t.Logf("workq: %d puts, %d takes, %d acks (%d lost claims), %d nacks, %d crashes", res.ops["workq: wqput ok"], res.ops["workq: wqtake ok"],
		res.ops["workq: wqack ok"], res.ops["workq: wqack fail"], res.ops["workq: wqnack ok"], res.ops["workq: wqdrop ok"])
}
