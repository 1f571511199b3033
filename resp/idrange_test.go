package resp

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/engine"
	"idserver/internal/memstore"
)

func TestAppendRuns(t *testing.T) {
	for _, tc := range []struct {
		ids  []int64
		runs [][2]int64
	}{
		{[]int64{7}, [][2]int64{{7, 7}}},
		{[]int64{1, 2, 3}, [][2]int64{{1, 3}}},
		{[]int64{1, 3, 5}, [][2]int64{{1, 1}, {3, 3}, {5, 5}}},
		{[]int64{10, 11, 12, 40, 41, 99}, [][2]int64{{10, 12}, {40, 41}, {99, 99}}},
	} {
		var got [][2]int64
		for _, r := range appendStepRuns(nil, tc.ids, 1) {
			got = append(got, [2]int64{r.First, r.Last})
		}
		if !slices.Equal(got, tc.runs) {
			t.Errorf("%v: runs %v, want %v", tc.ids, got, tc.runs)
		}
	}
}

// expandRuns checks a NEXTIDRUNS reply's shape (first, last pairs, first
// <= last, runs increasing and not touching: each run is as long as it can
// be) and returns its IDs.
func expandRuns(reply any) ([]int64, error) {
	flat, ok := reply.([]any)
	if !ok || len(flat) == 0 || len(flat)%2 != 0 {
		return nil, fmt.Errorf("NEXTIDRUNS reply %#v: not first, last pairs", reply)
	}
	var ids []int64
	for i := 0; i < len(flat); i += 2 {
		first, ok1 := flat[i].(int64)
		last, ok2 := flat[i+1].(int64)
		if !ok1 || !ok2 || first > last || first <= 0 {
			return nil, fmt.Errorf("run %#v, %#v: not two integers 0 < first <= last", flat[i], flat[i+1])
		}
		if len(ids) > 0 && first <= ids[len(ids)-1]+1 {
			return nil, fmt.Errorf("run [%d, %d] after %d: runs must increase with a gap", first, last, ids[len(ids)-1])
		}
		for id := first; id <= last; id++ {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// TestNextIDRunsOverGoRedis: NEXTIDRUNS answers count IDs as runs, in RESP2
// and RESP3, continuing NEXTID's strictly increasing sequence, and refuses
// what NEXTID refuses.
func TestNextIDRunsOverGoRedis(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rdb := newClient(t, addr, proto, "")
		prev, err := rdb.Do(ctx, "NEXTID").Int64()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 2, 100, 10000} {
			reply, err := rdb.Do(ctx, "NEXTIDRUNS", n).Result()
			if err != nil {
				t.Fatalf("NEXTIDRUNS %d: %v", n, err)
			}
			ids, err := expandRuns(reply)
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != n || ids[0] <= prev {
				t.Fatalf("NEXTIDRUNS %d: %d IDs from %d, after %d", n, len(ids), ids[0], prev)
			}
			if runs := len(reply.([]any)) / 2; n == 10000 && runs > 100 {
				t.Errorf("NEXTIDRUNS 10000 on an idle node: %d runs", runs)
			}
			prev = ids[len(ids)-1]
			next, err := rdb.Do(ctx, "NEXTID").Int64()
			if err != nil || next <= prev {
				t.Fatalf("NEXTID after NEXTIDRUNS: %d after %d, %v", next, prev, err)
			}
			prev = next
		}
	}
	st := &srv.cmdStats[commandTable["nextidruns"].index]
	if calls, issued := st.calls.Load(), st.issued.Load(); calls != 8 || issued != 2*(1+2+100+10000) {
		t.Errorf("counted %d NEXTIDRUNS calls, %d IDs", calls, issued)
	}
	// INFO's ids_issued counts them with NEXTID's (and 10 single NEXTIDs).
	if info, err := newClient(t, addr, 2, "").Info(ctx, "stats").Result(); err != nil || !strings.Contains(info, fmt.Sprintf("ids_issued:%d\r\n", 10+2*(1+2+100+10000))) {
		t.Errorf("INFO stats: %v\n%s", err, info)
	}
	rdb := newClient(t, addr, 2, "")
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"NEXTIDRUNS"}, "ERR wrong number of arguments for 'nextidruns' command"},
		{[]any{"NEXTIDRUNS", 1, 2}, "ERR wrong number of arguments for 'nextidruns' command"},
		{[]any{"NEXTIDRUNS", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"NEXTIDRUNS", "0"}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"NEXTIDRUNS", "10001"}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"NEXTIDRUNS", "-3"}, "ERR count is out of range, must be between 1 and 10000"},
	} {
		if err := rdb.Do(ctx, tc.args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestNextIDRunsInterleaved: NEXTIDRUNS, NEXTID and GENEID sent at once on
// several connections never share an ID, and each connection's NEXTIDRUNS
// and NEXTID IDs strictly increase in the order it asked for them (a
// GENEID between two NEXTIDs takes slots out of the runs; it never makes
// a run overlap).
func TestNextIDRunsInterleaved(t *testing.T) {
	addr := startServer(t, Config{})
	ctx := context.Background()
	const conns, rounds = 4, 200
	var mu sync.Mutex
	var all []int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			var mine, ordered []int64
			for i := range rounds {
				var ids []int64
				var err error
				switch i % 3 {
				case 0:
					var reply any
					if reply, err = rdb.Do(ctx, "NEXTIDRUNS", 1+i*g%500).Result(); err == nil {
						if ids, err = expandRuns(reply); err == nil {
							ordered = append(ordered, ids...)
						}
					}
				case 1:
					if ids, err = rdb.Do(ctx, "NEXTID", 1+i%50).Int64Slice(); err == nil {
						ordered = append(ordered, ids...)
					}
				default:
					ids, err = rdb.Do(ctx, "GENEID", fmt.Sprint("buyer-", i), 1+i%20).Int64Slice()
				}
				if err != nil {
					errs <- err
					return
				}
				mine = append(mine, ids...)
			}
			for i := 1; i < len(ordered); i++ {
				if ordered[i] <= ordered[i-1] {
					errs <- fmt.Errorf("connection %d: NEXTID/NEXTIDRUNS %d after %d", g, ordered[i], ordered[i-1])
					return
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("ID %d issued twice (of %d)", all[i], len(all))
		}
	}
	t.Logf("%d IDs, none twice", len(all))
}

// TestNextIDRunsFromAListSource: an IDSource without NextIDRuns gets its
// NextIDs cut into runs by the server, with the same reply.
func TestNextIDRunsFromAListSource(t *testing.T) {
	gen, err := engine.New(engine.Config{Layout: engine.DefaultLayout(), Worker: 3, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Embedding the interface hides the Generator's other methods.
	srv := New(Config{Version: "test"}, struct{ IDSource }{gen})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	rdb := newClient(t, ln.Addr().String(), 2, "")
	ctx := context.Background()
	var prev int64
	for _, n := range []int{1, 3000, 10000} {
		reply, err := rdb.Do(ctx, "NEXTIDRUNS", n).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids, err := expandRuns(reply)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != n || ids[0] <= prev {
			t.Fatalf("NEXTIDRUNS %d: %d IDs from %d, after %d", n, len(ids), ids[0], prev)
		}
		prev = ids[len(ids)-1]
	}
}

// TestGeneIDRunsOverGoRedis: GENEIDRUNS buyer count answers count IDs of
// the buyer's gene as runs a gene step (2^8) apart, in RESP2 and RESP3,
// continuing GENEID's strictly increasing sequence, counted as IDs, and
// refuses what GENEID refuses.
func TestGeneIDRunsOverGoRedis(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	ctx := context.Background()
	const step = 256
	for _, proto := range []int{2, 3} {
		rdb := newClient(t, addr, proto, "")
		prev, err := rdb.Do(ctx, "GENEID", "12345").Int64()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 2, 100, 10000} {
			reply, err := rdb.Do(ctx, "GENEIDRUNS", "12345", n).Result()
			if err != nil {
				t.Fatalf("GENEIDRUNS %d: %v", n, err)
			}
			flat := reply.([]any)
			var ids []int64
			for i := 0; i+1 < len(flat); i += 2 {
				first, last := flat[i].(int64), flat[i+1].(int64)
				if first > last || (last-first)%step != 0 || (len(ids) > 0 && first <= ids[len(ids)-1]) {
					t.Fatalf("GENEIDRUNS %d: run [%d, %d] after %v", n, first, last, ids[max(len(ids)-1, 0):])
				}
				for id := first; id <= last; id += step {
					ids = append(ids, id)
				}
			}
			if len(ids) != n || ids[0] <= prev {
				t.Fatalf("GENEIDRUNS %d: %d IDs from %d, after %d", n, len(ids), ids[0], prev)
			}
			for _, id := range ids {
				if id%step != 12345%step {
					t.Fatalf("GENEIDRUNS: %d has gene %d", id, id%step)
				}
			}
			if runs := len(flat) / 2; n == 10000 && runs > 700 {
				t.Errorf("GENEIDRUNS 10000 on an idle node: %d runs (16 IDs per gene per ms)", runs)
			}
			prev = ids[len(ids)-1]
			next, err := rdb.Do(ctx, "GENEID", "12345").Int64()
			if err != nil || next <= prev {
				t.Fatalf("GENEID after GENEIDRUNS: %d after %d, %v", next, prev, err)
			}
			prev = next
		}
	}
	st := &srv.cmdStats[commandTable["geneidruns"].index]
	if calls, issued := st.calls.Load(), st.issued.Load(); calls != 8 || issued != 2*(1+2+100+10000) {
		t.Errorf("counted %d GENEIDRUNS calls, %d IDs", calls, issued)
	}
	rdb := newClient(t, addr, 2, "")
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"GENEIDRUNS", "b"}, "ERR wrong number of arguments for 'geneidruns' command"},
		{[]any{"GENEIDRUNS", "b", 1, 2}, "ERR wrong number of arguments for 'geneidruns' command"},
		{[]any{"GENEIDRUNS", "b", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"GENEIDRUNS", "b", "0"}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"GENEIDRUNS", "b", "10001"}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"GENEIDRUNS", strings.Repeat("b", 257), "1"}, ""},
	} {
		err := rdb.Do(ctx, tc.args...).Err()
		if tc.want == "" {
			geneErr := rdb.Do(ctx, "GENEID", tc.args[1], 1).Err()
			if err == nil || geneErr == nil || err.Error() != geneErr.Error() {
				t.Errorf("GENEIDRUNS with a 257-byte buyer: %v, GENEID: %v", err, geneErr)
			}
			continue
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args[:min(len(tc.args), 3)], err, tc.want)
		}
	}
}
