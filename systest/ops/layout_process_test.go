package ops

// Process tests of the layout flags (--id-bits, --time-unit), the layout's
// lifetime in INFO, /metrics and the log, and UUIDV7 across kill -9.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/engine"
	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// infoFields reads INFO section as key:value pairs.
func infoFields(t *testing.T, rdb *redis.Client, section string) map[string]string {
	t.Helper()
	text, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// decodeFields is DECODE id's integer fields.
func decodeFields(t *testing.T, rdb *redis.Client, id int64) map[string]int64 {
	t.Helper()
	reply, err := rdb.Do(context.Background(), "DECODE", id).Result()
	if err != nil {
		t.Fatalf("DECODE %d: %v", id, err)
	}
	parts := map[string]int64{}
	switch r := reply.(type) {
	case map[any]any: // RESP3
		for k, v := range r {
			if n, ok := v.(int64); ok {
				parts[k.(string)] = n
			}
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if n, ok := r[i+1].(int64); ok {
				parts[r[i].(string)] = n
			}
		}
	}
	return parts
}

// TestFiftyThreeBitsInTensOfMilliseconds: idserver --id-bits 53
// --time-unit 10ms issues NEXTID, NEXTID n and GENEID below 2^53, in units
// of 10 ms, that DECODE takes apart; INFO names the layout and its end; a
// SIGTERM restart and a kill -9 restart go on above what was issued; a
// restart with another width or unit is refused, naming both layouts.
func TestFiftyThreeBitsInTensOfMilliseconds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	flags := []string{"--id-bits", "53", "--time-unit", "10ms"}
	p := systest.StartProc(t, dir, flags...)
	rdb := p.Client()
	want, _ := engine.AutoLayout(53, 10*time.Millisecond)
	info := infoFields(t, rdb, "snowflake")
	if info["layout"] != strings.ReplaceAll(want.String(), " ", ",") || info["id_bits"] != "53" || info["time_unit_ms"] != "10" ||
		!strings.HasPrefix(info["time_bits_end"], "2112-") {
		t.Fatalf("INFO snowflake: %v", info)
	}
	if years, _ := strconv.ParseFloat(info["time_bits_years_left"], 64); years < 80 || years > 90 {
		t.Fatalf("time_bits_years_left %s, want about 86", info["time_bits_years_left"])
	}
	var last int64
	issue := func(what string) {
		t.Helper()
		before := time.Now()
		id, err := rdb.Do(ctx, "NEXTID").Int64()
		if err != nil {
			t.Fatalf("%s: NEXTID: %v", what, err)
		}
		ids, err := rdb.Do(ctx, "NEXTID", 5000).Int64Slice()
		if err != nil {
			t.Fatalf("%s: NEXTID 5000: %v", what, err)
		}
		for _, next := range append([]int64{id}, ids...) {
			if next <= last || next >= 1<<53 {
				t.Fatalf("%s: NEXTID %d after %d (below 2^53 = %d?)", what, next, last, int64(1)<<53)
			}
			last = next
		}
		parts := decodeFields(t, rdb, id)
		ms := parts["time_ms"]
		if ms%10 != 0 || ms < before.UnixMilli()-20 || ms > time.Now().UnixMilli()+3000 || parts["worker"] != 0 {
			t.Fatalf("%s: DECODE %d = %v (issued at %d ms)", what, id, parts, before.UnixMilli())
		}
		gids, err := rdb.Do(ctx, "GENEID", "12345", 100).Int64Slice()
		if err != nil {
			t.Fatalf("%s: GENEID: %v", what, err)
		}
		for i, g := range gids {
			if g%64 != 12345%64 || g >= 1<<53 || (i > 0 && g <= gids[i-1]) {
				t.Fatalf("%s: GENEID 12345 #%d = %d (gene %d, want %d)", what, i, g, g%64, 12345%64)
			}
		}
		if gene := decodeFields(t, rdb, gids[0])["gene"]; gene != 12345%64 {
			t.Fatalf("%s: DECODE gene %d", what, gene)
		}
		if _, err := rdb.Do(ctx, "DECODE", int64(1)<<53).Result(); err == nil || !strings.Contains(err.Error(), "invalid id") {
			t.Fatalf("%s: DECODE 2^53: %v, want ERR invalid id", what, err)
		}
	}
	issue("first start")
	p.Shutdown()
	p = systest.StartProc(t, dir, flags...)
	rdb = p.Client()
	issue("after SIGTERM")
	p.Kill()
	p = systest.StartProc(t, dir, "--id-bits", "53") // 10ms is what 53 bits pick
	rdb = p.Client()
	issue("after kill -9")
	p.Shutdown()
	for _, other := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"id-bits=53", "time-unit=10ms", "[epoch=2025-01-01T00:00:00Z time-bits=41"}},
		{[]string{"--id-bits", "53", "--time-unit", "1s"}, []string{"time-unit=10ms", "time-unit=1s"}},
		{[]string{"--id-bits", "53", "--time-unit", "10ms", "--time-bits", "37", "--worker-bits", "6", "--seq-bits", "10", "--gene-bits", "6"},
			[]string{"time-bits=38", "time-bits=37"}},
	} {
		code, out := systest.RunToExit(t, append([]string{"--port", systest.FreePort(t), "--dir", dir}, other.args...)...)
		for _, w := range other.want {
			if code != 1 || !strings.Contains(out, w) {
				t.Fatalf("restart with %v: exit %d, want 1 naming %q:\n%s", other.args, code, w, out)
			}
		}
	}
}

// TestLayoutFlagsRefused: out-of-range --id-bits, an unknown --time-unit
// and durations that are not whole units exit 2 with a message, as other
// bad flags do.
func TestLayoutFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--id-bits", "39"}, "--id-bits 39 must be between 40 and 63"},
		{[]string{"--id-bits", "64"}, "--id-bits 64 must be between 40 and 63"},
		{[]string{"--id-bits", "x"}, "id-bits"},
		{[]string{"--time-unit", "5ms"}, `--time-unit "5ms": 1ms, 10ms or 1s`},
		{[]string{"--time-unit", "day"}, `--time-unit "day"`},
		{[]string{"--id-bits", "42", "--time-unit", "1ms"}, "leaves 1 bits"},
		{[]string{"--id-bits", "53", "--time-bits", "38"}, "must be 53"},
		{[]string{"--time-unit", "1s", "--max-borrow", "500ms"}, "--max-borrow 500ms is not a whole number of --time-unit 1s"},
		{[]string{"--time-unit", "1s", "--window", "1s"}, "--window 1s is shorter than two --time-unit 1s"},
	} {
		code, out := systest.RunToExit(t, append(tc.args, "--dir", t.TempDir())...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q; output:\n%s", tc.args, code, tc.want, out)
		}
	}
	if code, out := systest.RunToExitEnv(t, []string{"IDSERVER_TIME_UNIT=2s"}, "--dir", t.TempDir()); code != 2 || !strings.Contains(out, "--time-unit") {
		t.Errorf("IDSERVER_TIME_UNIT=2s: exit %d, output:\n%s", code, out)
	}
}

// TestLayoutLifetimeVisible: a layout with about a year and a half left
// starts, warns in its log, and shows its end in INFO and /metrics; one
// with half a year left is refused at start.
func TestLayoutLifetimeVisible(t *testing.T) {
	// 26 bits of seconds are 777 days; an epoch 777-548 days ago leaves
	// about a year and a half.
	span := time.Duration(1<<26) * time.Second
	leave := func(d time.Duration) string {
		return time.Now().Add(d - span).UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	widths := []string{"--id-bits", "53", "--time-unit", "1s", "--time-bits", "26", "--worker-bits", "7", "--seq-bits", "20", "--gene-bits", "8"}
	maddr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	p := systest.StartProc(t, t.TempDir(), append(widths, "--epoch", leave(548*24*time.Hour), "--metrics-addr", maddr)...)
	warned := func() bool {
		log := p.Log()
		return strings.Contains(log, "level=WARN") && strings.Contains(log, "run out in fewer than two years") &&
			strings.Contains(log, "days_left=54")
	}
	wait.For(t, 5*time.Second, "a warning of the layout's end in the log", func() (bool, string) { return warned(), p.Log() })
	info := infoFields(t, p.Client(), "snowflake")
	if years, _ := strconv.ParseFloat(info["time_bits_years_left"], 64); years < 1.45 || years > 1.55 {
		t.Fatalf("INFO snowflake: %v, want about 1.5 years left", info)
	}
	end, err := time.Parse(time.RFC3339, info["time_bits_end"])
	if err != nil || end.Sub(time.Now().Add(548*24*time.Hour)).Abs() > time.Minute {
		t.Fatalf("time_bits_end %q, want 548 days from now", info["time_bits_end"])
	}
	left := systest.MetricValue(t, systest.Scrape(t, "http://"+maddr+"/metrics"), "idserver_layout_time_left_seconds")
	if want := time.Until(end).Seconds(); left < want-60 || left > want+60 {
		t.Fatalf("idserver_layout_time_left_seconds %.0f, want about %.0f", left, want)
	}
	if id, err := p.Client().Do(context.Background(), "NEXTID").Int64(); err != nil || id <= 0 {
		t.Fatalf("NEXTID: %d, %v", id, err)
	}
	code, out := systest.RunToExit(t, append(widths, "--epoch", leave(180*24*time.Hour), "--dir", t.TempDir(), "--port", systest.FreePort(t))...)
	if code != 2 || !strings.Contains(out, "fewer than a year left") {
		t.Fatalf("half a year left: exit %d, output:\n%s", code, out)
	}
}

// TestUUIDv7IncreasesAcrossKillNine: UUIDV7 under load, while the node is
// killed with SIGKILL and restarted, again and again, some cycles with the
// clock stepped 3 s ahead before the kill (so the restarted node's clock is
// 3 s behind what it issued): each connection's UUIDs strictly increase,
// and every UUID is above every UUID of the cycles before, as NEXTID's IDs
// are.
func TestUUIDv7IncreasesAcrossKillNine(t *testing.T) {
	const cycles = 12
	dir := t.TempDir()
	ctx := context.Background()
	var last string // the largest UUID of the cycles before
	lastID, seenID := map[int64]int64{}, map[int64]bool{}
	total := 0
	for cycle := range cycles {
		p := systest.StartProc(t, dir, "--enable-debug-command")
		var uuids [2][]string // per connection, in reply order
		var ids []int64
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := p.Client()
				for i := 0; ; i++ {
					if w == 0 && i%3 == 2 {
						got, err := c.Do(ctx, "NEXTID", 20).Int64Slice()
						if err != nil && !strings.HasPrefix(err.Error(), "CLOCKBACK") {
							return
						}
						ids = append(ids, got...)
						continue
					}
					got, err := c.Do(ctx, "UUIDV7", 1+i%50).StringSlice()
					if err != nil {
						return
					}
					uuids[w] = append(uuids[w], got...)
				}
			}()
		}
		time.Sleep(time.Duration(100+50*(cycle%4)) * time.Millisecond)
		if cycle%3 == 1 {
			if err := p.Client().Do(ctx, "DEBUG", "CLOCK", 3000).Err(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		p.Kill()
		wg.Wait()
		top := last
		for w, conn := range uuids {
			if len(conn) == 0 {
				t.Fatalf("cycle %d: no UUIDs on connection %d before the kill", cycle, w)
			}
			prev := last
			for _, u := range conn {
				if u <= prev {
					t.Fatalf("cycle %d, connection %d: UUID %s after %s (the largest before the restart: %s)", cycle, w, u, prev, last)
				}
				prev = u
			}
			top = max(top, prev)
			total += len(conn)
		}
		last = top
		// NEXTIDs strictly increase per worker ID: a restart with the clock
		// more than --max-borrow behind its high-water (the cycles that
		// stepped it 3 s ahead) issues on a fresh worker ID, whose order
		// starts anew (docs/guarantees.md, promise 2); none repeats.
		for _, id := range ids {
			worker := (id >> 12) & 1023 // the default layout
			if id <= lastID[worker] || seenID[id] {
				t.Fatalf("cycle %d: NEXTID %d (worker %d) after %d", cycle, id, worker, lastID[worker])
			}
			lastID[worker], seenID[id] = id, true
		}
	}
	t.Logf("%d SIGKILL cycles (%d with the clock 3 s ahead before the kill), %d UUIDs, each above every UUID before it",
		cycles, cycles/3, total)
}

// TestClusterInSecondsJoinsAndRenews: a two-node cluster of 53-bit IDs in
// units of a second, with a 4 s worker lease: the joiner's layout check
// passes, both nodes issue unique IDs for twice the lease (the renewals
// work in whole seconds, no TRYAGAIN), and a joiner in units of 10 ms is
// refused, naming both units.
func TestClusterInSecondsJoinsAndRenews(t *testing.T) {
	flags := []string{"--id-bits", "53", "--time-unit", "1s", "--worker-lease", "4s"}
	a := systest.StartProc(t, t.TempDir(), flags...)
	b := systest.StartProc(t, t.TempDir(), append(flags, "--join", a.Addr)...)
	if wa, wb := systest.ClusterInfo(t, a.Client())["worker_id"], systest.ClusterInfo(t, b.Client())["worker_id"]; wa == wb {
		t.Fatalf("both nodes hold worker %s", wa)
	}
	n := systest.CollectIDs(t, 8*time.Second, a.Client(), b.Client())
	p, err := systest.Launch(t, t.TempDir(), nil, "--id-bits", "53", "--join", a.Addr)
	log := systest.WaitExit(t, p, err)
	if !strings.Contains(log, "time-unit=1s") || !strings.Contains(log, "time-unit=10ms") {
		t.Fatalf("the refusal does not name both layouts:\n%s", log)
	}
	t.Logf("2 nodes of 53-bit IDs in seconds, 4 s lease: %d IDs in 8 s, no repeat, no TRYAGAIN; a 10 ms joiner refused", n)
}

// TestNodeIssuesOnTheCounter: a node checks its readings on the monotonic
// clock (INFO snowflake clock_counter:monotonic).
func TestNodeIssuesOnTheCounter(t *testing.T) {
	want := "monotonic"
	p := systest.StartProc(t, t.TempDir())
	rdb := p.Client()
	ctx := context.Background()
	for range 100 {
		if err := rdb.Do(ctx, "NEXTID").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := infoFields(t, rdb, "snowflake")["clock_counter"]; got != want {
		t.Fatalf("INFO snowflake clock_counter:%s, want %s", got, want)
	}
	p.Shutdown()
}
