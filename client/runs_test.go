package idclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func expandAll(runs []run) []int64 {
	var vals []int64
	for _, r := range runs {
		for i := range r.count {
			vals = append(vals, r.next+i*r.step)
		}
	}
	return vals
}

func TestAppendRunsKeepsTheValues(t *testing.T) {
	for _, tc := range []struct {
		vals []int64
		runs int
	}{
		{[]int64{5}, 1},
		{[]int64{1, 2, 3, 4}, 1},
		{[]int64{3, 259, 515, 771}, 1}, // a gene's IDs, a gene step apart
		{[]int64{1, 2, 3, 10, 11, 20}, 3},
		{[]int64{1, 5, 6, 7}, 2},
		{[]int64{1, 3, 4, 9}, 2},
	} {
		runs := appendRuns(nil, tc.vals)
		if got := expandAll(runs); !slices.Equal(got, tc.vals) || len(runs) != tc.runs || countOf(runs) != int64(len(tc.vals)) {
			t.Errorf("%v: runs %+v expand to %v", tc.vals, runs, got)
		}
	}
}

// TestPopAndSkipOverRuns: the process buffer hands runs out in pieces of
// the size asked for, in order, each value once; Strict drops the values
// at or below the last one handed out.
func TestPopAndSkipOverRuns(t *testing.T) {
	vals := []int64{10, 11, 12, 13, 14, 100, 356, 612, 700}
	for _, strict := range []bool{false, true} {
		s := newSequence(&Client{}, nil, Buffer{Strict: strict}, 0, 100)
		add := func(vals []int64) {
			s.chunks = append(s.chunks, chunk{runs: appendRuns(nil, vals), size: len(vals), born: time.Now()})
			s.avail += len(vals)
		}
		add(vals)
		var got []int64
		for _, want := range []int{3, 1, 4} {
			runs, _ := s.pop(nil, want)
			if countOf(runs) != int64(want) {
				t.Fatalf("pop(%d) gave %+v", want, runs)
			}
			got = append(got, expandAll(runs)...)
		}
		// A batch from another node, partly below what was handed out.
		add([]int64{5, 612, 698, 699, 700, 701, 702, 800})
		runs, _ := s.pop(nil, 100)
		got = append(got, expandAll(runs)...)
		want := append(slices.Clone(vals[:8]), 700)
		if strict {
			want = append(want, 701, 702, 800)
		} else {
			want = append(want, 5, 612, 698, 699, 700, 701, 702, 800)
		}
		if !slices.Equal(got, want) || s.avail != 0 || len(s.chunks) != 0 {
			t.Fatalf("strict %v: handed out %v, want %v (%d left)", strict, got, want, s.avail)
		}
	}
}

// TestClientExpandsRunsFromTheServer: the full client takes snowflake IDs
// through NEXTIDRUNS (the server counts its calls and no NEXTID) from a
// real server with 16 sequence bits, while other connections send
// NEXTID, NEXTIDRUNS and GENEID to the same node: no ID twice, and each of
// those connections' IDs strictly increase.
func TestClientExpandsRunsFromTheServer(t *testing.T) {
	srv := startServer(t, "", "--worker-bits", "6", "--seq-bits", "16")
	c := newClient(t, Options{Addrs: []string{srv.Addr}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var others []int64
	var wg sync.WaitGroup
	for k, cmd := range [][]any{{"NEXTID", 100}, {"NEXTIDRUNS", 300}, {"GENEID", "buyer-1", 50}, {"GENEID", "7", 20}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer rdb.Close()
			var prev int64
			for ctx.Err() == nil {
				reply, err := rdb.Do(ctx, cmd...).Slice()
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("%v: %v", cmd, err)
					}
					return
				}
				var ids []int64
				for i, v := range reply {
					switch {
					case k != 1:
						ids = append(ids, v.(int64))
					case i%2 == 0:
						for id := v.(int64); id <= reply[i+1].(int64); id++ {
							ids = append(ids, id)
						}
					}
				}
				// One node's NEXTIDs, and one gene's GENEIDs, strictly
				// increase.
				for _, id := range ids {
					if id <= prev {
						t.Errorf("%v: %d after %d", cmd, id, prev)
						return
					}
					prev = id
				}
				mu.Lock()
				others = append(others, ids...)
				mu.Unlock()
			}
		}()
	}
	all, _ := collect(t, 4, 50000, c.Next)
	cancel()
	wg.Wait()
	assertUnique(t, append(all, others...))
	st := c.IDs().Stats()
	if calls := commandCalls(t, srv.Addr, "nextidruns"); calls < st.Fetches {
		t.Fatalf("server counted %d NEXTIDRUNS, the client sent %d", calls, st.Fetches)
	}
	t.Logf("%d IDs through the client in %d requests, %d from the other connections, none twice", len(all), st.Fetches, len(others))
}

// TestFallsBackToNextIDLists: a node that does not know NEXTIDRUNS (a
// proxy in front of a real server answers it as an older idserver would)
// gets NEXTID count instead, and the client keeps issuing.
func TestFallsBackToNextIDLists(t *testing.T) {
	srv := startServer(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go refuseNextIDRuns(conn, srv.Addr)
		}
	}()
	c := newClient(t, Options{Addrs: []string{ln.Addr().String()}})
	before := commandCalls(t, srv.Addr, "nextid")
	all, _ := collect(t, 2, 5000, c.Next)
	assertUnique(t, all)
	if !c.noRuns.Load() || commandCalls(t, srv.Addr, "nextid") == before || commandCalls(t, srv.Addr, "nextidruns") != 0 {
		t.Fatalf("no fallback to NEXTID: noRuns %v", c.noRuns.Load())
	}
	genes, _ := collect(t, 2, 2000, func(ctx context.Context) (int64, error) { return c.Gene(ctx, "12345") })
	assertUnique(t, genes)
	if !c.noGeneRuns.Load() || commandCalls(t, srv.Addr, "geneid") == 0 || commandCalls(t, srv.Addr, "geneidruns") != 0 {
		t.Fatalf("no fallback to GENEID: noGeneRuns %v", c.noGeneRuns.Load())
	}
}

// TestClientBuffersGeneIDsAsRuns: a gene's IDs come as GENEIDRUNS runs (no
// GENEID at all), expanded a gene step apart: unique, every one with the
// buyer's gene, while another connection's GENEIDs of the same gene
// interleave on the server.
func TestClientBuffersGeneIDsAsRuns(t *testing.T) {
	srv := startServer(t, "")
	c := newClient(t, Options{Addrs: []string{srv.Addr}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var others []int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer rdb.Close()
		for ctx.Err() == nil {
			ids, err := rdb.Do(ctx, "GENEID", "12345", 7).Int64Slice()
			if err != nil {
				return
			}
			others = append(others, ids...)
		}
	}()
	// One gene gets 16 IDs per ms; under the race detector sync.Pool drops
	// per-P caches (and their values) at random, so take fewer.
	n := 2500
	if raceEnabled {
		n = 250
	}
	all, _ := collect(t, 4, n, func(ctx context.Context) (int64, error) { return c.Gene(ctx, "12345") })
	cancel()
	<-done
	for _, id := range all {
		if id%256 != 12345%256 {
			t.Fatalf("Gene: %d has gene %d", id, id%256)
		}
	}
	assertUnique(t, append(all, others...))
	runs := commandCalls(t, srv.Addr, "geneidruns")
	if runs == 0 || c.noGeneRuns.Load() {
		t.Fatalf("the client sent %d GENEIDRUNS", runs)
	}
	t.Logf("%d gene IDs through the client in %d GENEIDRUNS, %d GENEIDs from another connection, none twice", len(all), runs, len(others))
}

// refuseNextIDRuns relays conn to addr, except that it answers a request
// naming NEXTIDRUNS or GENEIDRUNS itself with the error an idserver without it sends
// (go-redis sends one request per connection at a time).
func refuseNextIDRuns(conn net.Conn, addr string) {
	defer conn.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	go io.Copy(conn, up)
	buf := make([]byte, 64<<10)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return
		}
		if req := bytes.ToUpper(buf[:n]); bytes.Contains(req, []byte("NEXTIDRUNS")) || bytes.Contains(req, []byte("GENEIDRUNS")) {
			fmt.Fprintf(conn, "-ERR unknown command 'XIDRUNS', with args beginning with: \r\n")
			continue
		}
		if _, err := up.Write(buf[:n]); err != nil {
			return
		}
	}
}
