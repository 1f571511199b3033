package legacy

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/redis/go-redis/v9"
	"github.com/sony/sonyflake/v2"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

// runToExit runs idserver with args to its end, as systest.RunToExit
// does, but kills one that still runs after a minute: a start that should
// have been refused fails the test instead of hanging it.
func runToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, systest.Binary(t), args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("idserver %v was not refused: it still ran after a minute:\n%s", args, out)
	case err == nil:
		return 0, string(out)
	case !errors.As(err, &exit):
		t.Fatal(err)
	}
	return exit.ExitCode(), string(out)
}

// suggestedEpoch is the epoch an --above-id refusal names.
var suggestedEpoch = regexp.MustCompile(`an --epoch at or before (\S+) makes`)

func nextID(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	id, err := rdb.Do(context.Background(), "NEXTID").Int64()
	if err != nil {
		t.Fatalf("NEXTID: %v", err)
	}
	return id
}

// TestAboveID: --above-id with the largest ID of a legacy generator
// refuses a layout whose IDs do not sort above it now (exit 2, the epoch
// that would named), accepts the epoch it names and a layout shared with
// the generator, and the accepted layouts' IDs sort above the legacy ones.
// Against sonyflake (which counts 2^24 IDs per 10 ms) the 63-bit layout
// of milliseconds (2^22 per ms) stays above as both keep issuing.
func TestAboveID(t *testing.T) {
	g, err := snowflake.NewNode(3)
	if err != nil {
		t.Fatal(err)
	}
	legacy := g.Generate().Int64()
	above := strconv.FormatInt(legacy, 10)
	code, out := runToExit(t, "--dir", t.TempDir(), "--above-id", above)
	m := suggestedEpoch.FindStringSubmatch(out)
	if code != 2 || !strings.Contains(out, "--above-id "+above+": this layout's IDs are at ") || m == nil {
		t.Fatalf("the default layout (epoch 2025) above a bwmarrin ID (epoch 2010): exit %d:\n%s", code, out)
	}
	p := systest.StartProc(t, t.TempDir(), "--epoch", m[1], "--above-id", above)
	if id := nextID(t, p.Client()); id <= legacy {
		t.Fatalf("with the named --epoch %s: NEXTID %d, not above %d", m[1], id, legacy)
	}
	p.Shutdown()
	p = systest.StartProc(t, t.TempDir(), append(twitterFlags, "--reserved-workers", "0-15", "--above-id", above)...)
	if id := nextID(t, p.Client()); id <= legacy {
		t.Fatalf("with bwmarrin's own layout: NEXTID %d, not above %d", id, legacy)
	}
	p.Shutdown()

	sf, err := sonyflake.New(sonyflake.Settings{StartTime: time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC), MachineID: func() (int, error) { return 7, nil }})
	if err != nil {
		t.Fatal(err)
	}
	sonyID, _ := sf.NextID()
	above = strconv.FormatInt(sonyID, 10)
	code, out = runToExit(t, "--dir", t.TempDir(), "--above-id", above)
	if m = suggestedEpoch.FindStringSubmatch(out); code != 2 || m == nil {
		t.Fatalf("the default layout above a sonyflake v1 ID: exit %d:\n%s", code, out)
	}
	p = systest.StartProc(t, t.TempDir(), "--epoch", m[1], "--above-id", above)
	rdb := p.Client()
	for range 20 {
		later, _ := sf.NextID()
		if id := nextID(t, rdb); id <= later {
			t.Fatalf("with the named --epoch %s: NEXTID %d, not above sonyflake's %d made before it", m[1], id, later)
		}
	}
	code, out = runToExit(t, append(sonyflakeV1Flags, "--dir", t.TempDir(), "--above-id", strconv.FormatInt(sonyID+100<<24, 10))...)
	if code != 2 || !strings.Contains(out, "pass it only at ") {
		t.Fatalf("sonyflake's own layout above an ID a second ahead: exit %d:\n%s", code, out)
	}
}

// TestReservedWorkersFixedAtBootstrap: --reserved-workers is part of the
// layout: the node takes the lowest unreserved worker ID, INFO counts the
// reserved ones out of worker_ids_free, and a restart with other reserved
// workers, or none, is refused as any other layout is (exit 1, both
// layouts named); the same set written otherwise starts.
func TestReservedWorkersFixedAtBootstrap(t *testing.T) {
	dir := t.TempDir()
	p := systest.StartProc(t, dir, append(twitterFlags, "--reserved-workers", "0-15")...)
	rdb := p.Client()
	if w := decode(t, rdb, nextID(t, rdb)).Worker; w != 16 {
		t.Fatalf("worker %d, want 16, the lowest not reserved", w)
	}
	if free := systest.ClusterInfo(t, rdb)["worker_ids_free"]; free != "1007" {
		t.Fatalf("worker_ids_free %s, want 1007 (1024, 16 reserved, 1 held)", free)
	}
	p.Shutdown()
	for _, other := range [][]string{{"--reserved-workers", "0-7"}, nil} {
		code, out := runToExit(t, append(append([]string{"--dir", dir, "--port", systest.FreePort(t)}, twitterFlags...), other...)...)
		if code != 1 || !strings.Contains(out, "reserved-workers=0-15]") || !strings.Contains(out, "ID layout differs from the stored one") ||
			(other != nil && !strings.Contains(out, "reserved-workers=0-7]")) {
			t.Fatalf("restart with %v: exit %d, want 1 naming both layouts:\n%s", other, code, out)
		}
	}
	p = systest.StartProc(t, dir, append(twitterFlags, "--reserved-workers", "8-15, 0-7")...)
	if w := decode(t, p.Client(), nextID(t, p.Client())).Worker; w != 16 {
		t.Fatalf("after a restart: worker %d, want 16", w)
	}
}

// startCluster starts n idserver processes with flags, the first
// bootstrapping and the others joining it.
func startCluster(t *testing.T, n int, flags ...string) []*systest.Proc {
	t.Helper()
	var procs []*systest.Proc
	for i := range n {
		args := []string{"--port", systest.FreePort(t), "--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))}
		if i > 0 {
			args = append(args, "--join", procs[0].Addr)
		}
		procs = append(procs, systest.StartProc(t, t.TempDir(), append(args, flags...)...))
	}
	return procs
}

// TestReservedWorkersBesideARunningGenerator: 16 bwmarrin/snowflake nodes
// on worker IDs 0-15 and a three-node cluster with --reserved-workers 0-15
// on the same layout issue at once: no ID twice, the cluster's on workers
// 16-18 only.
func TestReservedWorkersBesideARunningGenerator(t *testing.T) {
	procs := startCluster(t, 3, append(twitterFlags, "--reserved-workers", "0-15")...)
	var (
		mu   sync.Mutex
		seen = map[int64]uint8{} // who: 0-15 a bwmarrin node, 16-18 a member
		dups []string
	)
	name := func(who uint8) string {
		if who < 16 {
			return fmt.Sprintf("bwmarrin node %d", who)
		}
		return fmt.Sprintf("member %d", who-16)
	}
	add := func(who uint8, ids ...int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if was, ok := seen[id]; ok && len(dups) < 10 {
				dups = append(dups, fmt.Sprintf("%d from %s and %s", id, name(was), name(who)))
			}
			seen[id] = who
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for node := range int64(16) {
		g, err := snowflake.NewNode(node)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			who := uint8(node)
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				for range 20 {
					add(who, g.Generate().Int64())
				}
			}
		})
	}
	workers := map[int64]bool{}
	var workersMu sync.Mutex
	for i, p := range procs {
		rdb := p.Client()
		wg.Go(func() {
			who := uint8(16 + i)
			for ctx.Err() == nil {
				ids, err := rdb.Do(ctx, "NEXTID", 100).Int64Slice()
				if err != nil {
					continue // the context ended mid-command
				}
				add(who, ids...)
				workersMu.Lock()
				for _, id := range ids {
					workers[id>>12&1023] = true
				}
				workersMu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(dups) > 0 {
		t.Fatalf("IDs issued twice: %v", dups)
	}
	for w := range workers {
		if w < 16 || w > 18 {
			t.Fatalf("the cluster issued on worker %d (workers %v)", w, workers)
		}
	}
	if len(workers) != 3 {
		t.Fatalf("the cluster issued on workers %v, want 16, 17 and 18", workers)
	}
	t.Logf("%d IDs, none twice; the cluster on workers %v", len(seen), workers)
}
