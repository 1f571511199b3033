package ops

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestMetricsMoveUnderLoadAndInfoParses scrapes /metrics around a load run
// and reads INFO the way ioredis's ready check does: "# Section" headers
// and key:value lines.
func TestMetricsMoveUnderLoadAndInfoParses(t *testing.T) {
	maddr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	p := systest.StartProc(t, t.TempDir(), "--metrics-addr", maddr, "--log-format", "json")
	if !strings.Contains(p.Log(), `"msg":"listening"`) {
		t.Fatalf("--log-format json: log is\n%s", p.Log())
	}
	if body := systest.Scrape(t, "http://"+maddr+"/healthz"); body != "ok\n" {
		t.Fatalf("/healthz: %q", body)
	}
	if body := systest.Scrape(t, "http://"+maddr+"/healthz?ready"); body != "ok\n" {
		t.Fatalf("/healthz?ready on a settled one-node cluster: %q", body)
	}
	before := systest.Scrape(t, "http://"+maddr+"/metrics")
	// Autopilot's figures: one voter, one healthy member (the leader's own
	// view), 1023 of 1024 worker IDs free.
	for sample, want := range map[string]float64{"idserver_raft_voters": 1, "idserver_worker_ids_free": 1023,
		"idserver_slow_disk_total": 0, "idserver_slow_disk_handoffs_total": 0} {
		if v := systest.MetricValue(t, before, sample); v != want {
			t.Errorf("%s = %v, want %v", sample, v, want)
		}
	}
	rdb := p.Client()
	ctx := context.Background()
	// Scrape while a client is issuing: the counters move under load.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 500 {
			rdb.Do(ctx, "NEXTID")
			rdb.Do(ctx, "INCR", "orders")
		}
	}()
	moved := 0
	for last := 0.0; ; {
		select {
		case <-done:
		default:
			v := systest.MetricValue(t, systest.Scrape(t, "http://"+maddr+"/metrics"), `idserver_ids_issued_total{command="nextid"}`)
			if v > last {
				moved++
			}
			last = v
			continue
		}
		break
	}
	if moved < 2 {
		t.Errorf("idserver_ids_issued_total moved in %d scrapes during the load, want several", moved)
	}
	rdb.Do(ctx, "INCR", "a tag: with\r\nodd bytes")
	rdb.Do(ctx, "NEXTID", "zero")
	after := systest.Scrape(t, "http://"+maddr+"/metrics")
	for _, c := range []struct {
		sample string
		min    float64
	}{
		{`idserver_commands_total{command="nextid"}`, 501},
		{`idserver_commands_total{command="incr"}`, 500},
		{`idserver_command_errors_total{command="nextid"}`, 1},
		{`idserver_command_duration_seconds_count{command="incr"}`, 500 / 16},
		{`idserver_ids_issued_total{command="nextid"}`, 500},
		{`idserver_segment_values_issued_total{command="incr"}`, 500},
		{`idserver_errors_total{code="ERR"}`, 1},
		{`idserver_raft_leader`, 1},
		{`idserver_raft_applied_index`, 1},
		{`idserver_segment_buffered_values`, 1},
		{`idserver_segment_buffered_tags`, 2},
		{`idserver_tags`, 2},
		{`idserver_window_headroom_ms`, 1},
		{`idserver_worker_lease_remaining_ms`, 1000},
	} {
		if v := systest.MetricValue(t, after, c.sample); v < c.min {
			t.Errorf("%s = %v, want at least %v", c.sample, v, c.min)
		}
	}
	if !regexp.MustCompile(`(?m)^idserver_window_sync_waits_total \d+$`).MatchString(after) {
		t.Error("no idserver_window_sync_waits_total sample")
	}
	if systest.MetricValue(t, after, `idserver_ids_issued_total{command="nextid"}`) <= systest.MetricValue(t, before, `idserver_ids_issued_total{command="nextid"}`) {
		t.Error("idserver_ids_issued_total did not move")
	}
	info, err := rdb.Info(ctx, "everything").Result()
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(strings.TrimRight(info, "\r\n"), "\r\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "# "):
			sections[strings.ToLower(line[2:])] = true
		case !regexp.MustCompile(`^[A-Za-z_0-9.%-]+:\S*$`).MatchString(line):
			t.Errorf("INFO line %q is not key:value", line)
		}
	}
	for _, s := range []string{"server", "clients", "stats", "persistence", "snowflake", "cluster", "segments", "commandstats", "errorstats", "keyspace"} {
		if !sections[s] {
			t.Errorf("INFO has no # %s section", s)
		}
	}
	if !strings.Contains(info, "buffered_tags:2") || !strings.Contains(info, "cmdstat_nextid:calls=") {
		t.Errorf("INFO:\n%s", info)
	}
}

// TestLivenessFailsOnARemovedNode: a node the cluster removed while it runs
// (here a CLUSTER FORGET) hands out nothing, so its liveness probe fails,
// for Kubernetes to restart it; restarted on its directory it joins again
// as a new member under its node ID, and the probe passes again.
func TestLivenessFailsOnARemovedNode(t *testing.T) {
	p1 := strconv.Itoa(testproc.FreePort(t))
	systest.StartProc(t, t.TempDir(), "--port", p1, "--raft-addr", "127.0.0.1:"+strconv.Itoa(testproc.FreePort(t)), "--worker-lease", "2s")
	maddr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	dir := t.TempDir()
	args := []string{"--port", strconv.Itoa(testproc.FreePort(t)), "--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t)),
		"--join", "127.0.0.1:" + p1, "--worker-lease", "2s", "--metrics-addr", maddr}
	p2 := systest.StartProc(t, dir, args...)
	if body := systest.Scrape(t, "http://"+maddr+"/healthz"); body != "ok\n" {
		t.Fatalf("/healthz: %q", body)
	}
	ctx := context.Background()
	id := systest.ClusterInfo(t, p2.Client())["node_id"]
	leader := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + p1})
	defer leader.Close()
	if err := leader.Do(ctx, "CLUSTER", "FORGET", id).Err(); err != nil {
		t.Fatal(err)
	}
	var status int
	var body string
	wait.Until(10*time.Second, func() (bool, string) {
		status, body = probe(t, "http://"+maddr+"/healthz")
		return status == http.StatusServiceUnavailable, ""
	})
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "not a member") {
		t.Fatalf("/healthz on the removed node: %d %q", status, body)
	}
	p2.Kill()
	p2 = systest.StartProc(t, dir, args...)
	if again := systest.ClusterInfo(t, p2.Client())["node_id"]; again != id {
		t.Fatalf("restarted, it is node %q, not %s", again, id)
	}
	if body := systest.Scrape(t, "http://"+maddr+"/healthz"); body != "ok\n" {
		t.Fatalf("/healthz after joining again: %q", body)
	}
	if !strings.Contains(p2.Log(), "joining again as a new member") {
		t.Fatalf("the restart did not say it joins again:\n%s", p2.Log())
	}
	t.Logf("removed by FORGET: /healthz answered %d %q; restarted, it joined again as %s", status, strings.TrimSpace(body), id)
}

// probe is a GET's status and body.
func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestTagMemoryInInfoAndMetrics: /metrics and INFO memory say how many
// tags there are and what they hold, on disk and in memory, and the
// figures move when tags are made.
func TestTagMemoryInInfoAndMetrics(t *testing.T) {
	maddr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	p := systest.StartProc(t, t.TempDir(), "--metrics-addr", maddr, "--max-tags", "0")
	rdb := p.Client()
	ctx := context.Background()
	infoMemory := func() map[string]float64 {
		t.Helper()
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]float64{}
		for _, line := range strings.Split(info, "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					fields[k] = f
				}
			}
		}
		return fields
	}
	const disk, mem = `idserver_tag_store_bytes{where="disk"}`, `idserver_tag_store_bytes{where="memory"}`
	before := systest.Scrape(t, "http://"+maddr+"/metrics")
	infoBefore := infoMemory()
	const tags = 20000
	for i := 0; i < tags; i += 1000 {
		pipe := rdb.Pipeline()
		for j := i; j < i+1000; j++ {
			pipe.Incr(ctx, "order:"+strconv.Itoa(j))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	after := systest.Scrape(t, "http://"+maddr+"/metrics")
	infoAfter := infoMemory()
	value := func(text, sample string) float64 { return systest.MetricValue(t, text, sample) }
	if got := value(after, "idserver_tags") - value(before, "idserver_tags"); got != tags {
		t.Errorf("idserver_tags moved by %v, want %d", got, tags)
	}
	if value(after, disk) <= value(before, disk) || value(after, mem) <= 0 {
		t.Errorf("idserver_tag_store_bytes: disk %v then %v, memory %v then %v: want disk to grow and memory above 0",
			value(before, disk), value(after, disk), value(before, mem), value(after, mem))
	}
	if got := value(after, "idserver_segment_buffer_bytes") - value(before, "idserver_segment_buffer_bytes"); got < tags*100 {
		t.Errorf("idserver_segment_buffer_bytes moved by %v for %d new buffers", got, tags)
	}
	for _, k := range []string{"tag_store_memory", "tag_store_disk", "segment_buffers", "segment_buffers_memory"} {
		if _, ok := infoAfter[k]; !ok {
			t.Fatalf("INFO memory has no %s: %v", k, infoAfter)
		}
	}
	if infoAfter["tag_store_disk"] <= infoBefore["tag_store_disk"] || infoAfter["tag_store_memory"] <= 0 ||
		infoAfter["segment_buffers"]-infoBefore["segment_buffers"] < tags {
		t.Errorf("INFO memory did not move with %d tags: before %v, after %v", tags, infoBefore, infoAfter)
	}
}
