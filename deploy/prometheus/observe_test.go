package prometheus

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
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

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

var record = flag.Bool("record", false, "TestRecordQuorumLoss: also write its recording to idserver-rules_test.yaml")

const (
	rulesFile     = "idserver-rules.yaml"
	rulesTestFile = "idserver-rules_test.yaml"
	dashboardFile = "../grafana/idserver.json"
)

func TestMain(m *testing.M) { systest.MainShort(m) }

// node is one idserver process with its metrics address.
type node struct {
	*testproc.Server
	metrics string // http://host:port/metrics
}

// startNode starts node id with --metrics-addr, joining join unless empty,
// and waits until it issues.
func startNode(t *testing.T, id, join string) *node {
	t.Helper()
	metrics := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	args := []string{"--node-id", id, "--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t)), "--metrics-addr", metrics}
	if join != "" {
		args = append(args, "--join", join)
	}
	s, err := testproc.Start(t, testproc.Config{Binary: systest.Binary(t), Dir: t.TempDir(), Args: args, Ready: []any{"NEXTID"}})
	if err != nil {
		t.Fatal(err)
	}
	return &node{s, "http://" + metrics + "/metrics"}
}

// sample is one line of the text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// series is the sample's name and labels as PromQL writes them, labels
// sorted, with extra added.
func (s sample) series(extra map[string]string) string {
	all := map[string]string{}
	for k, v := range s.labels {
		all[k] = v
	}
	for k, v := range extra {
		all[k] = v
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(all[k])
	}
	return s.name + "{" + strings.Join(parts, ",") + "}"
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape reads url's samples.
func scrape(url string) ([]sample, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, res.Status)
	}
	var out []sample
	for _, line := range strings.Split(string(body), "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]], _ = strconv.Unquote(`"` + p[2] + `"`)
		}
		out = append(out, s)
	}
	return out, nil
}

// scrapeUntil scrapes url until it answers (10 s).
func scrapeUntil(t *testing.T, url string) []sample {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		samples, err := scrape(url)
		if err == nil {
			return samples
		}
		if time.Now().After(deadline) {
			t.Fatalf("scraping %s: %v", url, err)
		}
	}
}

// value is the first sample named name with the labels in want; false
// when there is none.
func value(samples []sample, name string, want map[string]string) (float64, bool) {
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

var metricName = regexp.MustCompile(`\b(?:idserver|redis)_[a-z0-9_]+\b`)

// namedMetrics is every idserver_ and redis_ metric name in the rules and
// the dashboard's queries.
func namedMetrics(t *testing.T) (idserver, exporter []string) {
	t.Helper()
	return splitNames(append(ruleExprs(t), dashboardExprs(t)...))
}

// ruleExprs is every expr of the rules file.
func ruleExprs(t *testing.T) []string {
	t.Helper()
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, line := range strings.Split(string(rules), "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			exprs = append(exprs, e)
		}
	}
	if len(exprs) == 0 {
		t.Fatalf("%s has no expr", rulesFile)
	}
	return exprs
}

// splitNames is the idserver_ and the redis_ metric names in exprs.
func splitNames(exprs []string) (idserver, exporter []string) {
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			if seen[name] {
				continue
			}
			seen[name] = true
			if strings.HasPrefix(name, "idserver_") {
				idserver = append(idserver, name)
			} else {
				exporter = append(exporter, name)
			}
		}
	}
	slices.Sort(idserver)
	slices.Sort(exporter)
	return idserver, exporter
}

// dashboard is as much of a Grafana dashboard as the tests read.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// dashboardExprs decodes the dashboard and returns every query in it; a
// panel other than a row without one fails the test.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panels", dashboardFile)
	}
	var exprs []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
			}
			for _, q := range p.Targets {
				if q.Expr == "" {
					t.Errorf("%s: panel %q has an empty query", dashboardFile, p.Title)
				}
				exprs = append(exprs, q.Expr)
			}
		}
	}
	walk(d.Panels)
	return exprs
}

// load sends commands that fill the per-command series.
func load(t *testing.T, addr string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	for range 50 {
		for _, cmd := range [][]any{{"NEXTID"}, {"INCR", "orders"}, {"GET", "orders"}, {"NEXTSEG", "orders", "10"}} {
			if err := rdb.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		}
	}
	rdb.Do(ctx, "NOSUCHCOMMAND") // an error reply, for the error series
}

// TestRulesAndDashboardNameIdserverMetrics: every idserver_ metric that the
// alert rules and the dashboard name is on a live node's /metrics.
func TestRulesAndDashboardNameIdserverMetrics(t *testing.T) {
	testproc.Long(t)
	names, _ := namedMetrics(t)
	n := startNode(t, "n1", "")
	load(t, n.Addr)
	have := map[string]bool{}
	for _, s := range scrapeUntil(t, n.metrics) {
		have[s.name] = true
	}
	for _, name := range names {
		if !have[name] {
			t.Errorf("the rules or the dashboard name %s, which the node does not export", name)
		}
	}
	t.Logf("%d idserver metrics named: %v", len(names), names)
}

// TestDashboardNamesExporterMetrics: every redis_ metric the dashboard
// names is exported by prometheus-redis-exporter scraping a live node.
func TestDashboardNamesExporterMetrics(t *testing.T) {
	testproc.Long(t)
	exporter := testproc.Need(t, "prometheus-redis-exporter")
	_, names := namedMetrics(t)
	if len(names) == 0 {
		t.Fatal("the dashboard names no redis_exporter metric")
	}
	n := startNode(t, "n1", "")
	load(t, n.Addr)
	web := systest.StartExporter(t, exporter, n.Addr)
	samples := scrapeUntil(t, "http://"+web+"/metrics")
	if up, _ := value(samples, "redis_up", nil); up != 1 {
		t.Fatalf("redis_up is %v, not 1", up)
	}
	have := map[string]bool{}
	for _, s := range samples {
		have[s.name] = true
	}
	for _, name := range names {
		if !have[name] {
			t.Errorf("the dashboard names %s, which prometheus-redis-exporter does not export for idserver", name)
		}
	}
	t.Logf("%d exporter metrics named: %v", len(names), names)
}

// TestPromtoolRules: promtool accepts the rules and their tests pass.
func TestPromtoolRules(t *testing.T) {
	promtool := testproc.Need(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestRecordQuorumLoss records a real quorum loss and checks that the
// alert rules fire on it (promtool test rules); with -record it writes the
// recording to idserver-rules_test.yaml. It starts three nodes, scrapes n1 every second while all three run, kills
// n2 and n3 (SIGKILL), and scrapes n1 on until it has known no leader and
// been unable to issue for ten scrapes. The series the rules name become
// the promtool test's input (those of the rules only), one scrape per second of test time, each
// holding its last value after the last scrape; the expected alerts are
// those of expectations below.
func TestRecordQuorumLoss(t *testing.T) {
	testproc.Long(t)
	promtool := testproc.Need(t, "promtool")
	names, _ := splitNames(ruleExprs(t))
	wanted := map[string]bool{}
	for _, n := range names {
		wanted[n] = true
	}
	n1 := startNode(t, "n1", "")
	n2 := startNode(t, "n2", n1.Addr)
	n3 := startNode(t, "n3", n1.Addr)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		s, err := scrape(n1.metrics)
		tol, _ := value(s, "idserver_raft_failure_tolerance", nil)
		issue, _ := value(s, "idserver_can_issue", nil)
		if err == nil && tol == 1 && issue == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 never reported failure tolerance 1 and can issue (err %v)", err)
		}
	}
	var scrapes [][]sample
	take := func() []sample {
		s, err := scrape(n1.metrics)
		if err != nil {
			t.Fatal(err)
		}
		scrapes = append(scrapes, s)
		return s
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range healthyScrapes {
		take()
		<-tick.C
	}
	n2.Kill()
	n3.Kill()
	down := 0
	for down < 10 {
		s := take()
		leader, _ := value(s, "idserver_raft_has_leader", nil)
		issue, _ := value(s, "idserver_can_issue", nil)
		if leader == 0 && issue == 0 {
			down++
		} else {
			down = 0
		}
		if len(scrapes) > 120 {
			t.Fatalf("n1 still knows a leader or issues after %d scrapes", len(scrapes))
		}
		<-tick.C
	}
	text := renderRulesTest(t, scrapes, wanted)
	// promtool reads the rules beside the test file.
	dir := t.TempDir()
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rulesFile), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rulesTestFile), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", filepath.Join(dir, rulesTestFile)).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules on this recording: %v\n%s", err, out)
	}
	if *record {
		if err := os.WriteFile(rulesTestFile, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", rulesTestFile)
	}
	t.Logf("%d scrapes (%d healthy); the rules fire on them", len(scrapes), healthyScrapes)
}

// healthyScrapes are recorded before n2 and n3 are killed.
const healthyScrapes = 10

// recorded are the labels every recorded series gets, as a Prometheus
// scrape of job idserver adds them.
var recorded = map[string]string{"job": "idserver", "instance": "n1:9100"}

// expectation is one alert_rule_test: at evalTime, alert fires with these
// label sets (none: it does not fire).
type expectation struct {
	evalTime string
	alert    string
	firing   []map[string]string
}

// renderRulesTest writes the promtool test file: the recorded scrapes as
// input series (only the metrics in wanted), then the expectations, each
// alert's annotations rendered from the rules file.
func renderRulesTest(t *testing.T, scrapes [][]sample, wanted map[string]bool) string {
	t.Helper()
	values := map[string][]string{}
	for i, s := range scrapes {
		for _, smp := range s {
			if !wanted[smp.name] {
				continue
			}
			key := smp.series(recorded)
			for len(values[key]) < i {
				values[key] = append(values[key], "_")
			}
			values[key] = append(values[key], strconv.FormatFloat(smp.value, 'f', -1, 64))
		}
	}
	var b bytes.Buffer
	b.WriteString(`# Written by: go test -run TestRecordQuorumLoss ./deploy/prometheus/ -record (do not edit by hand).
# The first test's input series are recorded: node n1 of three on 127.0.0.1,
# scraped every second, ` + strconv.Itoa(healthyScrapes) + ` times while all three ran, then on after n2 and n3
# were killed (SIGKILL) until n1 had known no leader and been unable to issue
# for ten scrapes (` + strconv.Itoa(len(scrapes)) + ` scrapes in all). After the last scrape each series
# holds its last value. The second test's series are written by hand, for
# the alerts a quorum loss does not raise.
rule_files:
  - ` + rulesFile + `
evaluation_interval: 1s
tests:
  - name: a node that lost its quorum (recorded)
    interval: 1s
    input_series:
`)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := values[k]
		for len(v) < len(scrapes) {
			v = append(v, "_")
		}
		last := v[len(v)-1]
		fmt.Fprintf(&b, "      - series: '%s'\n        values: '%s %sx7200'\n", k, strings.Join(v, " "), last)
	}
	writeExpectations(t, &b, recordedExpectations(t, scrapes))
	b.WriteString(syntheticTest)
	writeExpectations(t, &b, syntheticExpectations)
	return b.String()
}

// recordedExpectations: while n1 was healthy (the last healthy scrape) no
// alert fires; at the first scrape whose lease was under 5 s while n1
// could still issue, IdserverLeaseRunningOut fires and
// IdserverCannotIssue does not; ten minutes after the last scrape it has
// no leader, cannot issue, its lease has ended, and the cluster has no
// failure tolerance left; nothing else fires (no elections: pre-vote keeps
// the term).
func recordedExpectations(t *testing.T, scrapes [][]sample) []expectation {
	t.Helper()
	healthy := fmt.Sprintf("%ds", healthyScrapes-1)
	later := fmt.Sprintf("%ds", len(scrapes)+600)
	node := map[string]string{"job": "idserver", "instance": "n1:9100"}
	cluster := map[string]string{"job": "idserver"}
	var out []expectation
	for _, a := range allAlerts {
		out = append(out, expectation{healthy, a, nil})
	}
	running := -1
	for i, s := range scrapes {
		lease, _ := value(s, "idserver_worker_lease_remaining_ms", nil)
		issue, _ := value(s, "idserver_can_issue", nil)
		if i >= healthyScrapes && lease > 0 && lease < 5000 && issue == 1 {
			running = i
			break
		}
	}
	if running < 0 {
		t.Fatal("no scrape saw n1's lease under 5 s while it could still issue")
	}
	at := fmt.Sprintf("%ds", running)
	out = append(out, expectation{at, "IdserverLeaseRunningOut", []map[string]string{node}}, expectation{at, "IdserverCannotIssue", nil})
	for _, a := range allAlerts {
		e := expectation{later, a, nil}
		switch a {
		case "IdserverNoLeader", "IdserverCannotIssue", "IdserverLeaseRunningOut":
			e.firing = []map[string]string{node}
		case "IdserverNoFailureTolerance":
			e.firing = []map[string]string{cluster}
		}
		out = append(out, e)
	}
	return out
}

var allAlerts = []string{"IdserverNoLeader", "IdserverCannotIssue", "IdserverLeaseRunningOut", "IdserverLayoutEnding",
	"IdserverDiskReserveLow", "IdserverDiskFull", "IdserverElectionsTooFrequent", "IdserverMemberKeptDead", "IdserverNoFailureTolerance"}

// syntheticTest: n1 with a layout 100 days from its end and 100 MiB free
// over a 64 MiB reserve, n2 with 10 MiB free; the term rising by one a
// second for 10 s; a failed member for 15 minutes.
const syntheticTest = `  - name: layout, disk, elections, a member kept dead (written by hand)
    interval: 1s
    input_series:
      - series: 'idserver_layout_time_left_seconds{instance="n1:9100",job="idserver"}'
        values: '8640000x1200'
      - series: 'idserver_disk_free_bytes{instance="n1:9100",job="idserver"}'
        values: '104857600x1200'
      - series: 'idserver_disk_reserve_bytes{instance="n1:9100",job="idserver"}'
        values: '67108864x1200'
      - series: 'idserver_disk_free_bytes{instance="n2:9100",job="idserver"}'
        values: '10485760x1200'
      - series: 'idserver_disk_reserve_bytes{instance="n2:9100",job="idserver"}'
        values: '67108864x1200'
      - series: 'idserver_raft_term{instance="n1:9100",job="idserver"}'
        values: '2+1x10 12x1200'
      - series: 'idserver_members{health="failed",instance="n1:9100",job="idserver"}'
        values: '1x1200'
`

var syntheticExpectations = []expectation{
	{"5s", "IdserverLayoutEnding", []map[string]string{{"job": "idserver", "instance": "n1:9100"}}},
	{"5s", "IdserverDiskFull", []map[string]string{{"job": "idserver", "instance": "n2:9100"}}},
	{"1m", "IdserverDiskReserveLow", nil},
	{"6m", "IdserverDiskReserveLow", []map[string]string{{"job": "idserver", "instance": "n1:9100"}, {"job": "idserver", "instance": "n2:9100"}}},
	{"4s", "IdserverElectionsTooFrequent", nil},
	{"1m", "IdserverElectionsTooFrequent", []map[string]string{{"job": "idserver"}}},
	{"5m", "IdserverMemberKeptDead", nil},
	{"11m", "IdserverMemberKeptDead", []map[string]string{{"job": "idserver"}}},
}

// writeExpectations writes es as alert_rule_test entries, the labels of
// each firing alert with its severity and annotations from the rules file.
func writeExpectations(t *testing.T, b *bytes.Buffer, es []expectation) {
	t.Helper()
	rules := parseRules(t)
	b.WriteString("    alert_rule_test:\n")
	for _, e := range es {
		r, ok := rules[e.alert]
		if !ok {
			t.Fatalf("%s has no alert %s", rulesFile, e.alert)
		}
		fmt.Fprintf(b, "      - eval_time: %s\n        alertname: %s\n", e.evalTime, e.alert)
		if len(e.firing) == 0 {
			b.WriteString("        exp_alerts: []\n")
			continue
		}
		b.WriteString("        exp_alerts:\n")
		for _, labels := range e.firing {
			b.WriteString("          - exp_labels:\n")
			all := map[string]string{"severity": r.severity}
			for k, v := range labels {
				all[k] = v
			}
			for _, k := range sortedKeys(all) {
				fmt.Fprintf(b, "              %s: %s\n", k, strconv.Quote(all[k]))
			}
			b.WriteString("            exp_annotations:\n")
			summary := strings.ReplaceAll(r.summary, "{{ $labels.instance }}", labels["instance"])
			fmt.Fprintf(b, "              summary: %s\n              description: %s\n", strconv.Quote(summary), strconv.Quote(r.description))
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// rule is what writeExpectations needs of one alert rule.
type rule struct{ severity, summary, description string }

// parseRules reads the alerts' severity, summary (a quoted string) and
// description (a folded ">-" block) from the rules file, as the file lays
// them out.
func parseRules(t *testing.T) map[string]rule {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]rule{}
	var name string
	var r rule
	inDesc, descIndent := false, 0
	flush := func() {
		if name != "" {
			rules[name] = r
		}
	}
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if inDesc {
			if trimmed != "" && indent > descIndent {
				r.description = strings.TrimSpace(r.description + " " + trimmed)
				continue
			}
			inDesc = false
		}
		switch {
		case strings.HasPrefix(trimmed, "- alert:"):
			flush()
			name, r = strings.TrimSpace(strings.TrimPrefix(trimmed, "- alert:")), rule{}
		case strings.HasPrefix(trimmed, "severity:"):
			r.severity = strings.TrimSpace(strings.TrimPrefix(trimmed, "severity:"))
		case strings.HasPrefix(trimmed, "summary:"):
			r.summary, err = strconv.Unquote(strings.TrimSpace(strings.TrimPrefix(trimmed, "summary:")))
			if err != nil {
				t.Fatalf("%s: %s: summary is not one double-quoted string", rulesFile, name)
			}
		case trimmed == "description: >-":
			inDesc, descIndent = true, indent
		}
	}
	flush()
	return rules
}
