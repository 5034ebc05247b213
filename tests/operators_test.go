package concurrency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// The operators' bundle (issue 31): the rules, their promtool tests and the
// dashboard in the module prometheus/. These tests tie them to the code:
// every metric they name is one the library exports, and every input
// series of the promtool tests has the labels and bucket bounds of a
// series the library exports, as scraped after real acquisitions of every
// kind of lock on the shared etcd cluster.
//
// bundleDir is read before TestMain, whose cluster set-up (etcd's
// integration.BeforeTest) changes the working directory.
var bundleDir = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "..", "prometheus")
}()

// exported is what a scrape of the library's metrics shows: for each
// metric family, its type and the label sets (names, sorted and joined
// with ",") of its series, with "le" for a histogram's _bucket series, and
// the values each label takes; and the bounds of each histogram's buckets.
type exported struct {
	families map[string]dto.MetricType
	labelSet map[string]map[string]bool // series name -> label name sets
	values   map[string]map[string]bool // label name -> values seen
	bounds   map[string]map[string]bool // histogram family -> le values
}

// scrapeLibrary runs every kind of lock once on sessions given metrics,
// and a Shards member until it owns its shard, with and without
// WithLockNameLabel, and returns what the two registries export.
func scrapeLibrary(t *testing.T) *exported {
	t.Helper()
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ex := &exported{families: map[string]dto.MetricType{}, labelSet: map[string]map[string]bool{},
		values: map[string]map[string]bool{}, bounds: map[string]map[string]bool{}}
	for i, opts := range [][]concurrencyprom.Option{nil, {concurrencyprom.WithLockNameLabel()}} {
		metrics, reg := newMetrics(t, opts...)
		s := newSession(t, c, concurrency.WithMetrics(metrics))
		ctx := t.Context()
		base := fmt.Sprintf("%s/%d", pfx, i)
		m := concurrency.NewMutex(s, base+"/mutex")
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		sem := concurrency.NewSemaphore(s, base+"/sem", 2)
		if err := sem.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sem.Release(ctx); err != nil {
			t.Fatal(err)
		}
		rw := concurrency.NewRWMutex(s, base+"/rw")
		if err := rw.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rw.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
		e := concurrency.NewElection(s, base+"/elect")
		if err := e.Campaign(ctx, "v"); err != nil {
			t.Fatal(err)
		}
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		// A Shards member of a group of one shard: its series, and one
		// unowned span (the shard is unowned at its first read).
		sctx, leave := context.WithCancel(ctx)
		owned := make(chan struct{})
		errc := async(t, func() error {
			return concurrency.Shards(sctx, c, base+"/shards", 1, func(ctx context.Context, sh concurrency.Shard) error {
				close(owned)
				<-ctx.Done()
				return nil
			}, concurrency.WithShardMetrics(metrics))
		})
		<-owned
		etcdtest.Eventually(t, 10*time.Second, func() bool { return sample(t, reg, "concurrency_shard_unowned_seconds", nil) == 1 },
			"no unowned span recorded")
		leave()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Shards returned %v", err)
		}
		scrapeWorkQueue(t, reg, s, base+"/work")
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		ex.add(mfs)
	}
	return ex
}

func (ex *exported) add(mfs []*dto.MetricFamily) {
	set := func(series string, names []string) {
		sort.Strings(names)
		if ex.labelSet[series] == nil {
			ex.labelSet[series] = map[string]bool{}
		}
		ex.labelSet[series][strings.Join(names, ",")] = true
	}
	for _, mf := range mfs {
		name := mf.GetName()
		ex.families[name] = mf.GetType()
		for _, m := range mf.GetMetric() {
			var names []string
			for _, lp := range m.GetLabel() {
				names = append(names, lp.GetName())
				if ex.values[lp.GetName()] == nil {
					ex.values[lp.GetName()] = map[string]bool{}
				}
				ex.values[lp.GetName()][lp.GetValue()] = true
			}
			if mf.GetType() != dto.MetricType_HISTOGRAM {
				set(name, names)
				continue
			}
			set(name+"_sum", slices.Clone(names))
			set(name+"_count", slices.Clone(names))
			set(name+"_bucket", append(slices.Clone(names), "le"))
			if ex.bounds[name] == nil {
				ex.bounds[name] = map[string]bool{"+Inf": true}
			}
			for _, b := range m.GetHistogram().GetBucket() {
				ex.bounds[name][strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] = true
			}
		}
	}
}

// family is the metric family of series name (a histogram's _bucket, _sum
// and _count belong to it), and whether it is exported.
func (ex *exported) family(name string) (string, bool) {
	if _, ok := ex.families[name]; ok {
		return name, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		f := strings.TrimSuffix(name, suf)
		if f != name && ex.families[f] == dto.MetricType_HISTOGRAM {
			return f, true
		}
	}
	return "", false
}

// metricWord matches the words of a PromQL text that contain the
// namespace of the library's metrics.
var metricWord = regexp.MustCompile(`[A-Za-z0-9_:]*` + concurrencyprom.DefaultNamespace + `_[A-Za-z0-9_:]*`)

// metricNames are the names of the library's metrics in a PromQL text:
// words that contain the namespace, other than recording rules' names
// (level:metric:operations, with colons).
func metricNames(text string) []string {
	var names []string
	for _, w := range metricWord.FindAllString(text, -1) {
		if !strings.Contains(w, ":") && !slices.Contains(names, w) {
			names = append(names, w)
		}
	}
	return names
}

func readBundle(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(bundleDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dashboardExprs are the queries of the dashboard's panels and template
// variables.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(readBundle(t, "dashboard.json")), &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("dashboard.json: panel %q has a target without a query", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			exprs = append(exprs, v.Definition)
		}
	}
	if len(exprs) == 0 {
		t.Fatal("dashboard.json has no queries")
	}
	return exprs
}

// Every metric that the rules and the dashboard name is one the library
// exports, and every metric it exports is in the dashboard and in a rule.
func TestOperatorsMetricNames(t *testing.T) {
	ex := scrapeLibrary(t)
	rules := readBundle(t, "rules.yml")
	dash := strings.Join(dashboardExprs(t), "\n")
	for file, text := range map[string]string{"rules.yml": rules, "dashboard.json": dash} {
		used := map[string]bool{}
		for _, n := range metricNames(text) {
			f, ok := ex.family(n)
			if !ok {
				t.Errorf("%s uses %s, which the library does not export", file, n)
				continue
			}
			used[f] = true
		}
		for f := range ex.families {
			if !used[f] {
				t.Errorf("%s does not use %s", file, f)
			}
		}
	}
}

// seriesLine is an input series of a promtool test:
// - series: 'name{label="value",...}'
var (
	seriesLine = regexp.MustCompile(`(?m)^\s*- series: '([^']*)'`)
	seriesSel  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$`)
	labelPair  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"\s*$`)
)

// Every input series of the promtool tests is shaped as the library exports
// it: a metric it exports, with the label names of one of its series (with
// or without WithLockNameLabel) plus the job and instance labels a scrape
// adds, label values the library uses for kind and cause, and bucket bounds
// its histograms have.
func TestOperatorsRuleTestSeries(t *testing.T) {
	ex := scrapeLibrary(t)
	text := readBundle(t, "rules_test.yml")
	lines := seriesLine.FindAllStringSubmatch(text, -1)
	if len(lines) < 10 {
		t.Fatalf("rules_test.yml: %d input series found, want many", len(lines))
	}
	for _, l := range lines {
		sel := seriesSel.FindStringSubmatch(l[1])
		if sel == nil {
			t.Errorf("rules_test.yml: cannot read series %q", l[1])
			continue
		}
		name := sel[1]
		fam, ok := ex.family(name)
		if !ok {
			t.Errorf("rules_test.yml: %s is not a series the library exports", l[1])
			continue
		}
		labels := map[string]string{}
		for _, p := range strings.Split(sel[2], ",") {
			kv := labelPair.FindStringSubmatch(p)
			if kv == nil {
				t.Errorf("rules_test.yml: cannot read label %q of %s", p, l[1])
				continue
			}
			labels[kv[1]] = kv[2]
		}
		if labels["job"] == "" || labels["instance"] == "" {
			t.Errorf("rules_test.yml: %s lacks the job or instance label of a scrape", l[1])
		}
		var names []string
		for n := range labels {
			if n != "job" && n != "instance" {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		if !ex.labelSet[name][strings.Join(names, ",")] {
			t.Errorf("rules_test.yml: %s has labels %v; the library's %s have %v", l[1], names, name, keys(ex.labelSet[name]))
		}
		for _, n := range []string{"kind", "cause"} {
			if v, ok := labels[n]; ok && !ex.values[n][v] {
				t.Errorf("rules_test.yml: %s: %s=%q is not a value the library exports (%v)", l[1], n, v, keys(ex.values[n]))
			}
		}
		if le, ok := labels["le"]; ok && !ex.bounds[fam][le] {
			t.Errorf("rules_test.yml: %s: le=%q is not a bucket bound of %s (%v)", l[1], le, fam, keys(ex.bounds[fam]))
		}
	}
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// The dashboard's queries are valid PromQL, as promtool parses them: each
// is written into a recording rule of a file that `promtool check rules`
// checks, with Grafana's variables replaced by values. promtool is not a
// dependency of any module here: .ci/promtool.sh builds it and CI passes
// its path in PROMTOOL.
func TestOperatorsDashboardQueries(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("PROMTOOL is not set: CI sets it to the output of bash .ci/promtool.sh")
		}
		t.Skip("PROMTOOL is not set (PROMTOOL=$(bash .ci/promtool.sh) runs this test)")
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", ".+")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range dashboardExprs(t) {
		if strings.HasPrefix(e, "label_values(") {
			// A Grafana function: its argument is the query.
			e = strings.TrimSuffix(strings.TrimPrefix(e, "label_values("), ", job)")
		}
		q, err := json.Marshal(vars.Replace(e)) // a JSON string is a YAML string
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "      - record: dashboard:query:%d\n        expr: %s\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, b.String())
	}
}

// scrapeWorkQueue registers a WorkQueueCollector of the queue name with
// reg and delivers an item twice (a Nack, then an Ack), observed.
func scrapeWorkQueue(t *testing.T, reg *prometheus.Registry, s *concurrency.Session, name string) {
	t.Helper()
	q, err := recipes.NewWorkQueue(s.Client(), name)
	if err != nil {
		t.Fatal(err)
	}
	col := concurrencyprom.NewWorkQueueCollector("", 0, q)
	if err := reg.Register(col); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(t.Context(), "job"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		d, err := q.Take(ctx, s)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		col.ObserveDelivery(q.Name(), d)
		if i == 0 {
			err = d.Nack(t.Context(), 0)
		} else {
			err = d.Ack(t.Context())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := sample(t, reg, "concurrency_workqueue_redeliveries_total", nil); got != 1 {
		t.Errorf("redeliveries %v, want 1", got)
	}
	if got := sample(t, reg, "concurrency_workqueue_items", map[string]string{"state": "ready"}); got != 0 {
		t.Errorf("ready items %v, want 0", got)
	}
}
