package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

func newInspectCommand(conn *connFlags) *cobra.Command {
	var asJSON bool
	var shards int
	cmd := &cobra.Command{
		Use:   "inspect [--json] NAME | inspect --shards N GROUP",
		Short: "Show the holders of a lock and its waiters in queue order",
		Long: `Show the holders of the lock NAME and its waiters in queue order, with each
key, lease ID, lease TTL left, create revision (the holder's fencing token),
how long each has waited and held, who it is (PID, HOST, LABEL), its kind and
its value. etcd keeps no time with a key: times come from the record
'etcdlock lock' writes into its key (on the clock of its host), and are "-"
for keys of other clients (etcdctl, libraries) and for semaphore keys, whose
value is their limit. PID, HOST and LABEL come from that record or from the
owner record of the key's session (concurrency.WithOwner, which etcdlock
lock and elect write for every kind of lock): "-" for sessions without one.
VALUE is the key's value when it is not etcdlock's record or a semaphore's
limit: an election's proposal, for one (quoted if it has spaces, cut at 40
characters; --json has it whole).

Every kind of lock is shown, told apart by its keys: KIND is "mutex" for
NAME/<lease> (a Mutex, etcdctl lock, or an election's candidate: the same
keys), "semaphore/N" for NAME/<lease>-<seq> with limit N, "reader" and
"writer" for NAME/r/... and NAME/w/... of a reader/writer lock. A key holds
by the rule of its kind: a mutex key or a writer when it is the oldest, a
semaphore key when the weights of the older keys and its own add up to at
most the limit N (a weight is 1 unless lock --weight set it), a reader when
no writer is older. POSITION is "holder" for a key that holds, else its place among the
waiters.

--json prints one object for scripts:
  {"name", "prefix", "revision", "kind" ("mutex", "semaphore", "rwmutex",
   "mixed", or "" when free), "holder": the oldest holder, ENTRY or null,
   "holders": [ENTRY...], "waiters": [ENTRY...]}
  ENTRY: {"key", "kind" ("mutex", "semaphore", "reader", "writer", "other"),
          "limit" and "weight" (semaphore), "holds", "lease" (hex), "ttl_seconds" (-1:
          lease gone), "create_revision", "position" (0: holder, 1: next
          waiter...), "value" (if not etcdlock's), "host", "pid", "label",
          "waiting_since", "held_since", "waited_seconds", "held_seconds",
          "yield_requested" (true once 'etcdlock yield' asked the hold),
          "health" ({"failures", "limit", "error"} while the session's
          --health-cmd fails, before it ends the session)}
The fields from etcdlock's record and the owner record are absent for keys
without them.

With --shards N, GROUP is a group of N shards (concurrency.Shards, etcdlock
shards): it prints the group's members (lease, weight, share, the shards
each owns, who it is) and the shards without a member owner, as
'etcdlock shards --list GROUP N' does. Each shard is a lock of its own,
GROUP/shard/<i>, which inspect shows as any other.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				return usagef("inspect NAME must not be empty")
			}
			if cmd.Flags().Changed("shards") && (shards <= 0 || shards > concurrency.MaxShardCount) {
				return usagef("inspect --shards %d (1 to %d): %w", shards, concurrency.MaxShardCount, concurrency.ErrInvalidShardCount)
			}
			ctx, stop := withSignals()
			defer stop()
			cli, err := conn.connect(ctx, lockPrefix(args[0]))
			if err != nil {
				return orInterrupted(ctx, "", err)
			}
			defer cli.Close()
			if cmd.Flags().Changed("shards") {
				if asJSON {
					return usagef("inspect --shards does not print JSON")
				}
				var o shardsOptions
				return o.listGroup(ctx, conn, cli, args[0], shards, cmd.OutOrStdout())
			}
			st, err := inspect(ctx, conn, cli, args[0])
			if err != nil {
				return orInterrupted(ctx, "", err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			st.print(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&shards, "shards", 0, "GROUP is a group of this many shards (Shards): show its members and owners")
	return cmd
}

// lockState is what inspect shows, and its JSON form.
type lockState struct {
	Name     string        `json:"name"`
	Prefix   string        `json:"prefix"`
	Revision int64         `json:"revision"`
	Kind     string        `json:"kind"`
	Holder   *entryState   `json:"holder"`
	Holders  []*entryState `json:"holders"`
	Waiters  []*entryState `json:"waiters"`
	// LockDelay is what is left of a lock-delay on the name, in seconds
	// (concurrency.Queue.LockDelay); absent when none runs.
	LockDelay *float64 `json:"lock_delay_seconds,omitempty"`
}

type entryState struct {
	Key            string              `json:"key"`
	Kind           string              `json:"kind"`
	Limit          int                 `json:"limit,omitempty"`
	Weight         int                 `json:"weight,omitempty"`
	Holds          bool                `json:"holds"`
	Lease          string              `json:"lease"`
	TTL            int64               `json:"ttl_seconds"`
	CreateRevision int64               `json:"create_revision"`
	Position       int                 `json:"position"`
	Value          string              `json:"value,omitempty"`
	Host           string              `json:"host,omitempty"`
	PID            int                 `json:"pid,omitempty"`
	Label          string              `json:"label,omitempty"`
	WaitingSince   *time.Time          `json:"waiting_since,omitempty"`
	HeldSince      *time.Time          `json:"held_since,omitempty"`
	Waited         *float64            `json:"waited_seconds,omitempty"`
	Held           *float64            `json:"held_seconds,omitempty"`
	YieldRequested bool                `json:"yield_requested,omitempty"`
	Health         *concurrency.Health `json:"health,omitempty"`
}

// inspect reads the queue of lock name and the TTL left of each lease.
func inspect(ctx context.Context, conn *connFlags, cli *clientv3.Client, name string) (*lockState, error) {
	rctx, cancel := conn.requestCtx(ctx)
	defer cancel()
	q, iq, err := readQueue(rctx, cli, name)
	if err != nil {
		return nil, fmt.Errorf("reading lock %q: %w", name, err)
	}
	now := time.Now()
	st := &lockState{Name: name, Prefix: lockPrefix(name), Revision: iq.Revision, Kind: queueKind(q), Holders: []*entryState{}, Waiters: []*entryState{}}
	if iq.LockDelay > 0 {
		st.LockDelay = seconds(iq.LockDelay)
	}
	for _, e := range q {
		es := &entryState{Key: e.Key, Kind: e.Kind, Limit: e.Limit, Weight: e.Weight, Holds: e.Holds, Lease: fmt.Sprintf("%x", int64(e.Lease)), TTL: e.TTL, CreateRevision: e.Rev, YieldRequested: e.Yield, Health: e.Health}
		if m := e.Meta; m != nil {
			es.WaitingSince = &m.WaitingSince
			if !m.HeldSince.IsZero() {
				es.HeldSince = &m.HeldSince
			}
		}
		if e.Meta == nil || e.MetaInOwner {
			es.Value = e.Value
		}
		w := e.who()
		es.Host, es.PID, es.Label = w.Host, w.PID, w.Label
		if d, ok := e.waited(now); ok {
			es.Waited = seconds(d)
		}
		if d, ok := e.held(now); ok {
			es.Held = seconds(d)
		}
		if e.Holds {
			st.Holders = append(st.Holders, es)
		} else {
			es.Position = len(st.Waiters) + 1
			st.Waiters = append(st.Waiters, es)
		}
	}
	if len(st.Holders) > 0 {
		st.Holder = st.Holders[0]
	}
	return st, nil
}

func seconds(d time.Duration) *float64 {
	s := d.Round(time.Millisecond).Seconds()
	return &s
}

func (st *lockState) print(w io.Writer) {
	if st.LockDelay != nil {
		fmt.Fprintf(w, "lock %q is in a lock-delay after a lost hold: no holder with --lock-delay is granted it for %s more\n", st.Name, age(st.LockDelay))
	}
	switch {
	case st.Holder == nil && len(st.Waiters) == 0:
		fmt.Fprintf(w, "lock %q is free (revision %d)\n", st.Name, st.Revision)
		return
	case st.Kind == kindMutex:
		fmt.Fprintf(w, "lock %q is held, %d waiting (revision %d)\n", st.Name, len(st.Waiters), st.Revision)
	case st.Kind == kindSemaphore:
		held := 0
		for _, e := range st.Holders {
			held += e.Weight
		}
		fmt.Fprintf(w, "semaphore %q (limit %d): %d of its permits held by %d holders, %d waiting (revision %d)\n", st.Name, append(st.Holders, st.Waiters...)[0].Limit, held, len(st.Holders), len(st.Waiters), st.Revision)
	case st.Kind == "rwmutex" && st.Holder != nil && st.Holder.Kind == kindWriter:
		fmt.Fprintf(w, "reader/writer lock %q is held by a writer, %d waiting (revision %d)\n", st.Name, len(st.Waiters), st.Revision)
	case st.Kind == "rwmutex":
		fmt.Fprintf(w, "reader/writer lock %q is held by %d readers, %d waiting (revision %d)\n", st.Name, len(st.Holders), len(st.Waiters), st.Revision)
	default:
		fmt.Fprintf(w, "lock %q has keys of several kinds: %d hold by the rule of their kind, %d wait (revision %d)\n", st.Name, len(st.Holders), len(st.Waiters), st.Revision)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tKEY\tLEASE\tTTL\tCREATE-REV\tWAITED\tHELD\tPID\tHOST\tLABEL\tKIND\tVALUE")
	for _, e := range append(append([]*entryState{}, st.Holders...), st.Waiters...) {
		pos := "holder"
		if e.Position > 0 {
			pos = fmt.Sprint(e.Position)
		}
		ttl := "gone"
		if e.TTL >= 0 {
			ttl = fmt.Sprintf("%ds", e.TTL)
		}
		pid := "-"
		if e.PID != 0 {
			pid = fmt.Sprint(e.PID)
		}
		kind, value := e.Kind, e.Value
		if kind == kindSemaphore {
			// The value is the limit and the weight.
			kind, value = fmt.Sprintf("semaphore/%d", e.Limit), fmt.Sprintf("weight=%d", e.Weight)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			pos, e.Key, e.Lease, ttl, e.CreateRevision, age(e.Waited), age(e.Held), pid,
			cell(e.Host), cell(e.Label), kind, cell(value))
	}
	tw.Flush()
	for _, e := range st.Holders {
		if e.YieldRequested {
			fmt.Fprintf(w, "etcdlock yield asked %s to let go (it does if it opted in)\n", e.Key)
		}
	}
	for _, e := range append(append([]*entryState{}, st.Holders...), st.Waiters...) {
		if h := e.Health; h != nil {
			fmt.Fprintf(w, "the session of %s failed %d of %d health checks in a row, the last: %s\n", e.Key, h.Failures, h.Limit, oneLine(h.Err))
		}
	}
}

func age(s *float64) string {
	if s == nil {
		return "-"
	}
	return roundAge(time.Duration(*s * float64(time.Second))).String()
}

// maxCell is the longest host, label or value the table shows, in runes.
const maxCell = 40

// cell is s for one cell of the table: "-" when empty; quoted (Go syntax)
// when it holds spaces, quotes, characters that are not printable, or is
// "-" itself, so that the columns and "-" stay unambiguous; cut to maxCell
// runes, with "..." after it (outside the quotes), when longer.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	more := ""
	if r := []rune(s); len(r) > maxCell {
		s, more = string(r[:maxCell]), "..."
	}
	if s == "-" || strings.ContainsFunc(s, func(r rune) bool { return r == '"' || !unicode.IsGraphic(r) || unicode.IsSpace(r) }) {
		s = strconv.Quote(s)
	}
	return s + more
}
