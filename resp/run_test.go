package resp

import (
	"bufio"
	"context"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"idserver/engine"
	"idserver/internal/memstore"
)

// frames writes each command as a RESP multibulk request, as clients and
// redis-benchmark send them.
func frames(cmds ...string) string {
	var b []byte
	for _, c := range cmds {
		var args [][]byte
		for _, a := range strings.Fields(c) {
			args = append(args, []byte(a))
		}
		b = referenceMultiBulk(b, args)
	}
	return string(b)
}

func repeat(cmd string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = cmd
	}
	return out
}

// readInts reads n integer replies.
func readInts(t *testing.T, rd *bufio.Reader, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		line := readLine(t, rd)
		if line == "" || line[0] != ':' {
			t.Fatalf("reply %d: %q, want an integer", i, line)
		}
		v, err := strconv.ParseInt(line[1:], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

func increasing(t *testing.T, what string, vs []int64) {
	t.Helper()
	for i := 1; i < len(vs); i++ {
		if vs[i] <= vs[i-1] {
			t.Fatalf("%s: %d after %d at %d", what, vs[i], vs[i-1], i)
		}
	}
}

// TestPipelinedRunsAnswerEveryCommand: a pipeline of runs (NEXTID, GENEID
// of one buyer, INCR of one tag, each broken by other commands, keys and
// case) gets one reply per command, in order, with the values each
// command would have had alone, and every command counted.
func TestPipelinedRunsAnswerEveryCommand(t *testing.T) {
	segs := engine.NewSegments(newFakeCluster(), 10, time.Now) // small segments: runs cross their ends
	srv, addr := startServerT(t, Config{Segments: segs, Cluster: newFakeCluster()})
	conn, rd := dial(t, addr)
	var cmds []string
	cmds = append(cmds, repeat("NEXTID", 300)...)
	cmds = append(cmds, "PING", "nextid", "NeXtId")
	cmds = append(cmds, repeat("GENEID buyer7", 40)...)
	cmds = append(cmds, "GENEID 9", "GENEID buyer7")
	cmds = append(cmds, repeat("INCR orders", 2500)...)
	cmds = append(cmds, "INCR other", "INCR orders", "INCR other", "NEXTID 3", "INCRBY orders 10", "INCR orders")
	send(t, conn, frames(cmds...))

	ids := readInts(t, rd, 300)
	if line := readLine(t, rd); line != "+PONG" {
		t.Fatalf("PING inside the pipeline: %q", line)
	}
	ids = append(ids, readInts(t, rd, 2)...)
	increasing(t, "NEXTID", ids)
	gene := engine.DefaultLayout().Gene([]byte("buyer7"))
	genes := readInts(t, rd, 40)
	nine := readInts(t, rd, 1)[0]
	genes = append(genes, readInts(t, rd, 1)...)
	increasing(t, "GENEID buyer7", genes)
	for _, id := range genes {
		if uint32(id&255) != gene {
			t.Fatalf("GENEID buyer7: %d has gene %d, want %d", id, id&255, gene)
		}
	}
	if nine&255 != 9 {
		t.Fatalf("GENEID 9: gene %d", nine&255)
	}
	orders := readInts(t, rd, 2500)
	for i, v := range orders {
		if v != int64(i+1) {
			t.Fatalf("INCR orders %d answered %d: a run must take the values single INCRs would", i+1, v)
		}
	}
	rest := readInts(t, rd, 3)
	if rest[0] != 1 || rest[1] != 2501 || rest[2] != 2 {
		t.Fatalf("INCR other, orders, other: %v", rest)
	}
	if line := readLine(t, rd); line != "*3" {
		t.Fatalf("NEXTID 3: %q", line)
	}
	three := readInts(t, rd, 3)
	increasing(t, "NEXTID 3", append(ids[len(ids)-1:], three...))
	if last := readInts(t, rd, 2); last[0] != 2511 || last[1] != 2512 {
		t.Fatalf("INCRBY orders 10, INCR orders: %v", last)
	}

	for name, want := range map[string][2]int64{"nextid": {303, 305}, "geneid": {42, 42}, "incr": {2504, 2504}, "incrby": {1, 10}, "ping": {1, 0}} {
		st := &srv.cmdStats[commandTable[name].index]
		if st.calls.Load() != want[0] || st.issued.Load() != want[1] {
			t.Errorf("%s: %d calls, %d issued; want %d, %d", name, st.calls.Load(), st.issued.Load(), want[0], want[1])
		}
	}
	if n := srv.stats.commands.Load(); n != int64(len(cmds)) {
		t.Errorf("commands counted: %d, want %d", n, len(cmds))
	}
	st := &srv.cmdStats[commandTable["incr"].index]
	if timed := st.timed.Load(); timed < 2504/latencySample-2 || timed > 2504/latencySample+2 {
		t.Errorf("INCR: %d calls timed, want about one in %d", timed, latencySample)
	}
}

// TestRunsInsideMultiAreQueued: inside MULTI a run is queued command by
// command and EXEC answers each.
func TestRunsInsideMultiAreQueued(t *testing.T) {
	addr := startServer(t, Config{Segments: engine.NewSegments(newFakeCluster(), 1000, time.Now)})
	conn, rd := dial(t, addr)
	send(t, conn, frames(append(append([]string{"MULTI"}, repeat("INCR t", 3)...), "EXEC")...))
	want := []string{"+OK", "+QUEUED", "+QUEUED", "+QUEUED", "*3", ":1", ":2", ":3"}
	for _, w := range want {
		if line := readLine(t, rd); line != w {
			t.Fatalf("got %q, want %q", line, w)
		}
	}
}

// TestRunErrorsAreEachCommands: a run the engine refuses, or whose key is
// refused, answers every command with the error single commands get, and
// counts each as a failed call.
func TestRunErrorsAreEachCommands(t *testing.T) {
	gen, err := engine.New(engine.Config{Layout: engine.DefaultLayout(), Worker: 3, MaxBorrow: time.Second, LeaseEndMS: 1}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Segments: engine.NewSegments(newFakeCluster(), 1000, time.Now)}, gen)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, rd := dial(t, ln.Addr().String())
	long := strings.Repeat("b", MaxKeyLen+1)
	send(t, conn, frames(append(append(repeat("NEXTID", 5), repeat("GENEID "+long, 3)...), repeat("INCR "+long, 3)...)...))
	for i := range 5 {
		if line := readLine(t, rd); !strings.HasPrefix(line, "-TRYAGAIN ") {
			t.Fatalf("NEXTID %d past the lease: %q", i, line)
		}
	}
	for i := range 6 {
		if line := readLine(t, rd); !strings.HasPrefix(line, "-ERR ") || !strings.Contains(line, "must be 1 to 256 bytes") {
			t.Fatalf("command %d with a long key: %q", i, line)
		}
	}
	for name, want := range map[string]int64{"nextid": 5, "geneid": 3, "incr": 3} {
		st := &srv.cmdStats[commandTable[name].index]
		if st.calls.Load() != want || st.errors.Load() != want {
			t.Errorf("%s: %d calls, %d failed; want %d of each", name, st.calls.Load(), st.errors.Load(), want)
		}
	}
}

// BenchmarkDispatch is the path from the read buffer to the reply buffer:
// parse, look up, run, append the reply, for one command at a time (P1)
// and for a pipeline of 32 (P32), without the socket. It allocates
// nothing per command (-benchmem: 0 allocs/op).
// TestIntRepliesAreRedconsBytes: the replies of a run, each written from
// the one before, are byte for byte redcon.AppendInt's, across carries
// (9 to 10, 999 to 1000, into a new digit), steps of every size, values
// that go down or repeat, negatives and the ends of int64.
func TestIntRepliesAreRedconsBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var values []int64
	for _, start := range []int64{0, 1, 8, 95, 998, 99_999, 1<<53 - 3, 253561772353519712, math.MaxInt64 - 40, -12, math.MinInt64} {
		v := start
		for range 60 {
			values = append(values, v)
			switch rng.IntN(6) {
			case 0:
				v += int64(rng.IntN(300))
			case 1:
				v -= int64(rng.IntN(5))
			case 2:
				v += int64(rng.IntN(1 << 22))
			default:
				v++
			}
		}
	}
	var r intReplies
	var got []byte
	for i, v := range values {
		got = r.append(got[:0], v)
		if want := redcon.AppendInt(nil, v); string(got) != string(want) {
			t.Fatalf("value %d (%d), after %d: %q, want %q", i, v, values[max(i-1, 0)], got, want)
		}
	}
}

func BenchmarkDispatch(b *testing.B) {
	gen, err := engine.New(engine.Config{Layout: engine.Layout{Epoch: engine.DefaultLayout().Epoch, TimeBits: 41, WorkerBits: 2, SeqBits: 20, GeneBits: 8},
		Worker: 3, MaxBorrow: time.Hour, LeaseEndMS: math.MaxInt64, Monotonic: engine.MonotonicClock()}, time.Now, &memstore.HighWater{})
	if err != nil {
		b.Fatal(err)
	}
	srv := New(Config{Segments: engine.NewSegments(newFakeCluster(), engine.MaxSegmentStep, time.Now)}, gen)
	for _, bc := range []struct {
		name string
		cmd  string
	}{{"NEXTID", "NEXTID"}, {"GENEID", "GENEID 12345"}, {"INCR", "INCR orders"}, {"PING", "PING"}} {
		for _, pipeline := range []int{1, 32} {
			b.Run(bc.name+"/P"+strconv.Itoa(pipeline), func(b *testing.B) {
				in := []byte(frames(repeat(bc.cmd, pipeline)...))
				cn := &connection{limit: DefaultClientOutputLimit}
				c := &client{conn: cn, proto: 2, authed: true}
				cn.SetContext(c)
				p := frameParser{lim: DefaultLimits()}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					for start := 0; start < len(in); {
						args, used, _ := p.parse(in[start:], false)
						frame := in[start : start+used]
						start += used
						start += srv.handle(c, cn, &p, args, frame, in[start:])
					}
					cn.out = cn.out[:0]
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pipeline), "ns/cmd")
			})
		}
	}
}

// TestFramesAcrossReads: the serve loop's buffer keeps a frame cut by a
// read, moves it to the front when the buffer is full, grows it for a
// frame larger than the buffer and lets it go afterwards.
func TestFramesAcrossReads(t *testing.T) {
	addr := startServer(t, Config{})
	conn, rd := dial(t, addr)
	big := strings.Repeat("x", 60000)
	echo := frames("ECHO " + big)
	for off := 0; off < len(echo); off += 977 { // a frame over many reads
		send(t, conn, echo[off:min(off+977, len(echo))])
		time.Sleep(time.Millisecond)
	}
	if line := readLine(t, rd); line != "$60000" {
		t.Fatalf("ECHO of 60000 bytes: %q", line)
	}
	if line := readLine(t, rd); line != big {
		t.Fatalf("ECHO of 60000 bytes came back as %d bytes", len(line))
	}
	// More than the 4 KiB buffer of pipelined frames, the last cut in two.
	pings := frames(repeat("PING", 400)...) + frames("ECHO tail")
	send(t, conn, pings[:len(pings)-5])
	time.Sleep(10 * time.Millisecond)
	send(t, conn, pings[len(pings)-5:])
	for i := range 400 {
		if line := readLine(t, rd); line != "+PONG" {
			t.Fatalf("PING %d: %q", i, line)
		}
	}
	if a, b := readLine(t, rd), readLine(t, rd); a != "$4" || b != "tail" {
		t.Fatalf("ECHO tail: %q %q", a, b)
	}
}

// TestConcurrentRunsNeverRepeat: connections pipelining runs of INCR on one
// tag and of NEXTID at once get values no other reply holds, each
// connection's increasing.
func TestConcurrentRunsNeverRepeat(t *testing.T) {
	segs := engine.NewSegments(newFakeCluster(), 10, time.Now)
	addr := startServer(t, Config{Segments: segs})
	const conns, each = 6, 2000
	type result struct {
		incr, ids []int64
	}
	results := make(chan result, conns)
	for range conns {
		go func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				results <- result{}
				return
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			go conn.Write([]byte(frames(append(repeat("INCR shared", each), repeat("NEXTID", each)...)...)))
			rd := bufio.NewReader(conn)
			var r result
			for i := range 2 * each {
				line, err := rd.ReadString('\n')
				if err != nil || line[0] != ':' {
					t.Errorf("reply %d: %q, %v", i, line, err)
					break
				}
				v, _ := strconv.ParseInt(strings.TrimSpace(line[1:]), 10, 64)
				if i < each {
					r.incr = append(r.incr, v)
				} else {
					r.ids = append(r.ids, v)
				}
			}
			results <- r
		}()
	}
	seenIncr, seenIDs := map[int64]bool{}, map[int64]bool{}
	for range conns {
		r := <-results
		increasing(t, "INCR shared on one connection", r.incr)
		increasing(t, "NEXTID on one connection", r.ids)
		for _, v := range r.incr {
			if seenIncr[v] {
				t.Fatalf("INCR shared: %d answered twice", v)
			}
			seenIncr[v] = true
		}
		for _, v := range r.ids {
			if seenIDs[v] {
				t.Fatalf("NEXTID: %d answered twice", v)
			}
			seenIDs[v] = true
		}
	}
	if len(seenIncr) != conns*each || len(seenIDs) != conns*each {
		t.Fatalf("%d INCR values and %d IDs, want %d of each", len(seenIncr), len(seenIDs), conns*each)
	}
}

// TestPreAuthLimitsEndWithAuthInTheSamePacket: the pre-AUTH frame limits
// apply by the connection's state when each frame is read, as in Redis: a
// large frame pipelined behind a successful AUTH in the same packet is
// served, and one behind a failed AUTH is refused (redis-server 7.0 answers
// both packets with these bytes).
func TestPreAuthLimitsEndWithAuthInTheSamePacket(t *testing.T) {
	addr := startServer(t, Config{Password: "pw"})
	eleven := "ECHO " + strings.TrimSpace(strings.Repeat("a ", 10))
	conn, rd := dial(t, addr)
	send(t, conn, frames("AUTH pw", eleven))
	if a, b := readLine(t, rd), readLine(t, rd); a != "+OK" || b != "-ERR wrong number of arguments for 'echo' command" {
		t.Fatalf("after AUTH: %q %q", a, b)
	}
	conn, rd = dial(t, addr)
	send(t, conn, frames("AUTH nope", eleven))
	if a, b := readLine(t, rd), readLine(t, rd); !strings.HasPrefix(a, "-WRONGPASS") || b != "-ERR Protocol error: unauthenticated multibulk length" {
		t.Fatalf("after a failed AUTH: %q %q", a, b)
	}
	expectClosed(t, rd)
}

// batchCluster is a fakeCluster that also allocates for several tags at
// once (engine.BatchSource), recording each batch's tags.
type batchCluster struct {
	*fakeCluster
	batchMu sync.Mutex
	batches [][]string
}

func (b *batchCluster) AllocateEach(ctx context.Context, tags []string, n []int64) []engine.Allocation {
	b.batchMu.Lock()
	b.batches = append(b.batches, append([]string(nil), tags...))
	b.batchMu.Unlock()
	out := make([]engine.Allocation, len(tags))
	for i, tag := range tags {
		out[i].First, out[i].Last, out[i].Err = b.Allocate(ctx, tag, n[i])
	}
	return out
}

// TestNewTagsOfAPipelineAreAllocatedTogether: INCRs of new tags read
// together have their first segments asked for in one batch; the
// lookahead stops at the first other command, so a tag whose INCR is
// queued in a MULTI and discarded is never created.
func TestNewTagsOfAPipelineAreAllocatedTogether(t *testing.T) {
	bc := &batchCluster{fakeCluster: newFakeCluster()}
	addr := startServer(t, Config{Segments: engine.NewSegments(bc, 1000, time.Now)})
	conn, rd := dial(t, addr)
	send(t, conn, frames("INCR a", "INCR b", "INCR a", "INCR c", "MULTI", "INCR d", "DISCARD"))
	want := []string{":1", ":1", ":2", ":1", "+OK", "+QUEUED", "+OK"}
	for _, w := range want {
		if line := readLine(t, rd); line != w {
			t.Fatalf("got %q, want %q", line, w)
		}
	}
	bc.batchMu.Lock()
	batches := bc.batches
	bc.batchMu.Unlock()
	if len(batches) != 1 || strings.Join(batches[0], " ") != "a b c" {
		t.Fatalf("batches %q, want one: a b c", batches)
	}
	if _, made := bc.Get("d"); made {
		t.Fatal("tag d, only queued in a discarded MULTI, was created")
	}
}
