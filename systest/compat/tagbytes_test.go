package compat

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

// randomTags are n distinct tag names of 1..256 random bytes, after the
// ones that break naive code: a byte that is not UTF-8, NUL, CR LF, a
// quote, a space, a label-like string, and the longest allowed.
func randomTags(n int, seed uint64) []string {
	tags := []string{"\xff", "\x00", "a\r\n:5\r\n", `q"uote\`, "with space", `x{tag="y"} 1`, strings.Repeat("\xfe", 256)}
	seen := map[string]bool{}
	for _, t := range tags {
		seen[t] = true
	}
	r := rand.New(rand.NewPCG(seed, seed))
	for len(tags) < n {
		b := make([]byte, 1+r.IntN(256))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		if !seen[string(b)] {
			seen[string(b)] = true
			tags = append(tags, string(b))
		}
	}
	return tags
}

// TestTagsOfAnyBytes: tag names are bytes, as Redis keys are. Tags of
// random bytes are issued from; then /metrics parses as Prometheus's text
// format, INFO stays key:value lines, SCAN and GET give every tag back
// byte for byte, every JSON log line is JSON, and all of it again after a
// restart, while the process lives throughout.
func TestTagsOfAnyBytes(t *testing.T) {
	dir := t.TempDir()
	maddr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	args := []string{"--metrics-addr", maddr, "--log-format", "json"}
	tags := randomTags(300, 7)
	ctx := context.Background()

	p := systest.StartProc(t, dir, args...)
	rdb := p.Client()
	for i, tag := range tags {
		if v, err := rdb.Incr(ctx, tag).Result(); err != nil || v != 1 {
			t.Fatalf("INCR %q: %v %v", tag, v, err)
		}
		if i%3 == 0 { // an error reply that names the tag
			if err := rdb.Set(ctx, tag, 0, 0).Err(); err == nil || !strings.Contains(err.Error(), "values never go back") {
				t.Fatalf("SET %q 0 after INCR: %v", tag, err)
			}
		}
	}
	checkTags := func(p *systest.Proc, rdb *redis.Client) {
		t.Helper()
		body := systest.Scrape(t, "http://"+maddr+"/metrics")
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("/metrics does not parse: %v", err)
		}
		if f := families["idserver_tags"]; f == nil || f.Metric[0].GetGauge().GetValue() != float64(len(tags)) {
			t.Errorf("idserver_tags: %v, want %d", f, len(tags))
		}
		for name, f := range families {
			for _, m := range f.Metric {
				for _, l := range m.Label {
					if l.GetName() == "tag" {
						t.Fatalf("%s has a per-tag series", name)
					}
				}
			}
		}
		info, err := rdb.Info(ctx, "everything").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimRight(info, "\r\n"), "\r\n") {
			if line != "" && !strings.HasPrefix(line, "# ") && !strings.Contains(line, ":") {
				t.Fatalf("INFO line %q", line)
			}
		}
		if _, err := rdb.Do(ctx, "CLUSTER", "INFO").Result(); err != nil {
			t.Fatal(err)
		}
		scanned := map[string]bool{}
		iter := rdb.Scan(ctx, 0, "", 100).Iterator()
		for iter.Next(ctx) {
			scanned[iter.Val()] = true
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		for _, tag := range tags {
			if !scanned[tag] {
				t.Errorf("SCAN did not give back %q", tag)
			}
			if v, err := rdb.Get(ctx, tag).Int64(); err != nil || v < 1 {
				t.Errorf("GET %q: %v %v", tag, v, err)
			}
		}
		if len(scanned) != len(tags) {
			t.Errorf("SCAN gave %d tags, want %d", len(scanned), len(tags))
		}
		for _, line := range strings.Split(strings.TrimSpace(p.Log()), "\n") {
			if !json.Valid([]byte(line)) {
				t.Errorf("log line is not JSON: %q", line)
			}
		}
	}
	checkTags(p, rdb)
	p.Shutdown()

	p = systest.StartProc(t, dir, args...)
	rdb = p.Client()
	checkTags(p, rdb)
	for _, tag := range tags[:20] {
		if v, err := rdb.Incr(ctx, tag).Result(); err != nil || v <= 1 {
			t.Errorf("INCR %q after the restart: %v %v", tag, v, err)
		}
	}
	checkTags(p, rdb)
}

// TestMetricsAskForThePassword: with --requirepass, /metrics answers only
// a request that carries the password as HTTP basic auth; /healthz stays
// open for the probes.
func TestMetricsAskForThePassword(t *testing.T) {
	maddr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	systest.StartProc(t, t.TempDir(), "--metrics-addr", maddr, "--requirepass", "s3cret")
	get := func(user, pass string) int {
		req, _ := http.NewRequest("GET", "http://"+maddr+"/metrics", nil)
		if pass != "" {
			req.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		user, pass string
		want       int
	}{{"", "", 401}, {"default", "wrong", 401}, {"default", "s3cret", 200}, {"prometheus", "s3cret", 200}} {
		if got := get(c.user, c.pass); got != c.want {
			t.Errorf("/metrics as %q/%q: %d, want %d", c.user, c.pass, got, c.want)
		}
	}
	if body := systest.Scrape(t, "http://"+maddr+"/healthz"); body != "ok\n" {
		t.Errorf("/healthz: %q", body)
	}
}
