package idclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/engine"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

func newClient(t *testing.T, opts Options) *Client {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// idTime is the wall time inside an ID of the default layout.
func idTime(id int64) time.Time {
	return engine.DefaultLayout().Epoch.Add(time.Duration(id>>22) * time.Millisecond)
}

// collect runs g goroutines taking n values each from next and returns
// every value, and each goroutine's values in the order it got them.
func collect(t *testing.T, g, n int, next func(context.Context) (int64, error)) ([]int64, [][]int64) {
	t.Helper()
	per := make([][]int64, g)
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for range n {
				v, err := next(ctx)
				if err != nil {
					errs <- err
					return
				}
				per[i] = append(per[i], v)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var all []int64
	for _, p := range per {
		all = append(all, p...)
	}
	return all, per
}

func assertUnique(t *testing.T, vals []int64) {
	t.Helper()
	s := slices.Clone(vals)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			t.Fatalf("value %d handed out twice (of %d)", s[i], len(s))
		}
	}
}

// levels are the buffering levels switched on one by one, as the
// benchmarks measure them.
var levels = []struct {
	name string
	buf  Buffer
}{
	{"one-per-request", Buffer{Batch: 1, FixedBatch: true, Prefetch: -1, NoSingleflight: true, Local: -1}},
	{"batch", Buffer{Batch: 128, FixedBatch: true, Prefetch: -1, NoSingleflight: true, Local: -1}},
	{"+prefetch", Buffer{Batch: 128, FixedBatch: true, NoSingleflight: true, Local: -1}},
	{"+singleflight", Buffer{Batch: 128, FixedBatch: true, Local: -1}},
	{"+adaptive", Buffer{Batch: 128, Local: -1}},
	{"+per-P", Buffer{}},
	{"+per-P, NEXTID lists", Buffer{NoRuns: true}},
}

// idCommand is the command a Buffer fetches snowflake IDs with.
func idCommand(buf Buffer) string {
	if buf.NoRuns {
		return "nextid"
	}
	return "nextidruns"
}

// TestEachLevelIssuesUniqueIDs: every level hands out unique IDs from 4
// goroutines, and the server counts exactly the requests the client says
// it sent, far fewer than IDs once batching is on.
func TestEachLevelIssuesUniqueIDs(t *testing.T) {
	srv := startServer(t, "")
	for _, lv := range levels {
		t.Run(lv.name, func(t *testing.T) {
			c := newClient(t, Options{Addrs: []string{srv.Addr}, Buffer: lv.buf})
			before := commandCalls(t, srv.Addr, idCommand(lv.buf))
			const g, n = 4, 2000
			all, _ := collect(t, g, n, c.Next)
			assertUnique(t, all)
			for _, id := range all {
				if d := time.Since(idTime(id)); d < -time.Second || d > 5*time.Second {
					t.Fatalf("id %d carries time %v", id, idTime(id))
				}
			}
			c.Close()
			calls := commandCalls(t, srv.Addr, idCommand(lv.buf)) - before
			st := c.IDs().Stats()
			if calls != st.Fetches {
				t.Fatalf("server counted %d %s, client sent %d", calls, idCommand(lv.buf), st.Fetches)
			}
			if lv.buf.Batch == 1 && calls != g*n {
				t.Fatalf("one per request: %d requests for %d IDs", calls, g*n)
			}
			if lv.buf.Batch > 1 && calls > g*n/64 {
				t.Fatalf("batching: %d requests for %d IDs", calls, g*n)
			}
			t.Logf("%d IDs, %d requests, %d waits, %d dropped, batch %d", len(all), calls, st.Waits, st.Dropped, st.Batch)
		})
	}
}

// TestPrefetchRefillsUnderLoad: under a steady load, the low-water refill keeps the buffer ahead of the
// callers: only a few takes wait for the server, against one wait per
// request without prefetch.
func TestPrefetchRefillsUnderLoad(t *testing.T) {
	srv := startServer(t, "")
	// Callers that serve requests: 100 IDs, then a pause of a millisecond.
	work := func(next func(context.Context) (int64, error)) func(context.Context) (int64, error) {
		var n atomic.Int64
		return func(ctx context.Context) (int64, error) {
			if n.Add(1)%100 == 0 {
				time.Sleep(time.Millisecond)
			}
			return next(ctx)
		}
	}
	run := func(buf Buffer) SequenceStats {
		c := newClient(t, Options{Addrs: []string{srv.Addr}, Buffer: buf})
		all, _ := collect(t, 4, 20000, work(c.Next))
		assertUnique(t, all)
		return c.IDs().Stats()
	}
	// A fixed batch, so that both runs send the same requests.
	with := run(Buffer{Local: -1, Batch: 2000, FixedBatch: true})
	without := run(Buffer{Local: -1, Batch: 2000, FixedBatch: true, Prefetch: -1})
	t.Logf("prefetch: %+v; no prefetch: %+v", with, without)
	if without.Waits < without.Fetches {
		t.Fatalf("without prefetch every request is a wait: %+v", without)
	}
	// The first request is always waited for, by up to 4 callers; on a
	// loaded machine a refill is now and then late.
	if with.Waits*2 > with.Fetches || with.Waits*3 > without.Waits {
		t.Fatalf("with prefetch most refills should happen ahead of the callers: %+v", with)
	}
}

// TestSingleflightCollapsesMisses: 32 callers find the buffer empty at
// once; the server sees one NEXTIDRUNS. Without singleflight it sees more.
func TestSingleflightCollapsesMisses(t *testing.T) {
	srv := startServer(t, "")
	run := func(buf Buffer) int64 {
		c := newClient(t, Options{Addrs: []string{srv.Addr}, Buffer: buf})
		// Connect first so that the race is for IDs, not for a dial.
		for _, n := range c.nodes {
			if err := n.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		before := commandCalls(t, srv.Addr, "nextidruns")
		start := make(chan struct{})
		var wg sync.WaitGroup
		var ids sync.Map
		var dup atomic.Bool
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				id, err := c.Next(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if _, loaded := ids.LoadOrStore(id, true); loaded {
					dup.Store(true)
				}
			}()
		}
		close(start)
		wg.Wait()
		if dup.Load() {
			t.Fatal("an ID handed out twice")
		}
		return commandCalls(t, srv.Addr, "nextidruns") - before
	}
	for round := range 5 {
		if one := run(Buffer{Batch: 64, FixedBatch: true, Prefetch: -1, Local: -1}); one != 1 {
			t.Fatalf("round %d: singleflight: %d requests for 32 concurrent misses, want 1", round, one)
		}
	}
	// The control: without singleflight the misses send their own
	// requests, when they are concurrent; the scheduler sometimes runs the
	// 32 goroutines one after the other, so allow a few rounds.
	var many int64
	for round := 0; round < 5 && many < 2; round++ {
		many = run(Buffer{Batch: 64, FixedBatch: true, Prefetch: -1, Local: -1, NoSingleflight: true})
	}
	t.Logf("32 concurrent misses: 1 request with singleflight (5 rounds), %d without", many)
	if many < 2 {
		t.Fatalf("without singleflight: %d requests in 5 rounds, want several", many)
	}
}

// TestFreshnessDropsOldIDs: IDs buffered longer than MaxAge are dropped;
// the next ID is fetched anew and carries a recent time.
func TestFreshnessDropsOldIDs(t *testing.T) {
	srv := startServer(t, "")
	for _, local := range []int{-1, 0} {
		c := newClient(t, Options{Addrs: []string{srv.Addr}, MaxAge: 200 * time.Millisecond, Buffer: Buffer{Batch: 1000, FixedBatch: true, Prefetch: -1, Local: local}})
		ctx := context.Background()
		first, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		taken := time.Now()
		next, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st := c.IDs().Stats()
		// With per-P caches, the 127 IDs in the first P's cache are
		// dropped when that cache is next used, which may be on another
		// call.
		if st.Fetches != 2 || (st.Dropped != 999 && !(local == 0 && st.Dropped == 1000-defaultLocal)) {
			t.Fatalf("local %d: after MaxAge: %+v, want 2 fetches and the buffered IDs dropped", local, st)
		}
		if next <= first || taken.Sub(idTime(next)) > 100*time.Millisecond {
			t.Fatalf("local %d: the ID after MaxAge is %d (time %v, taken %v), first was %d", local, next, idTime(next), taken, first)
		}
	}
}

// TestCloseDropsBufferedIDs: after Close, nothing buffered comes out,
// neither from the process buffer nor from a per-P cache, nor from a
// request that was in flight.
func TestCloseDropsBufferedIDs(t *testing.T) {
	srv := startServer(t, "")
	c := newClient(t, Options{Addrs: []string{srv.Addr}, Buffer: Buffer{Batch: 1000, FixedBatch: true}})
	ctx := context.Background()
	if _, err := c.Next(ctx); err != nil {
		t.Fatal(err)
	}
	ctr := c.Counter("orders")
	if _, err := ctr.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Gene(ctx, "buyer-7"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	for range 100 {
		if _, err := c.Next(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("Next after Close: %v, want ErrClosed", err)
		}
		if _, err := ctr.Next(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("Counter.Next after Close: %v", err)
		}
		if _, err := c.Gene(ctx, "buyer-7"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Gene after Close: %v", err)
		}
		if _, err := c.UUIDv7(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("UUIDv7 after Close: %v", err)
		}
	}
	if d := c.IDs().Stats().Dropped; d < 1000-defaultLocal {
		t.Fatalf("Close dropped %d buffered IDs, want the ~999 left", d)
	}
}

// TestServerKillDuringRefill: a server killed with SIGKILL while callers
// refill: callers get the buffered IDs, then an error (not a hang), and
// once the server is back on the same data the client serves again; no
// ID comes out twice.
func TestServerKillDuringRefill(t *testing.T) {
	port := freePort(t)
	srv := startServer(t, "", "--port", port)
	c := newClient(t, Options{Addrs: []string{srv.Addr}, Timeout: time.Second, Buffer: Buffer{Batch: 64, MaxBatch: 256}})
	var mu sync.Mutex
	var all []int64
	var errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				id, err := c.Next(ctx)
				cancel()
				if err != nil {
					errs.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				mu.Lock()
				all = append(all, id)
				mu.Unlock()
			}
		}()
	}
	issued := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(all)
	}
	wait.For(t, 10*time.Second, "IDs before the kill", func() (bool, string) { return issued() > 0, "none" })
	srv.Kill()
	wait.For(t, 5*time.Second, "an error reaches the callers after the server died", func() (bool, string) { return errs.Load() > 0, "none" })
	atKill := issued()
	srv.start()
	wait.Until(15*time.Second, func() (bool, string) { return issued() > atKill+1000, "" })
	close(stop)
	wg.Wait()
	if len(all) <= atKill+1000 {
		t.Fatalf("after the restart the client issued %d IDs", len(all)-atKill)
	}
	assertUnique(t, all)
	t.Logf("%d IDs, %d before the restart, %d errors while the server was down", len(all), atKill, errs.Load())
}

// TestErrorsOnlyWhenTheBufferIsEmpty: with the server gone, the refills
// started at the low-water mark fail in the background, and callers still
// get every buffered ID; only the take after the last one sees the error.
func TestErrorsOnlyWhenTheBufferIsEmpty(t *testing.T) {
	srv := startServer(t, "")
	c := newClient(t, Options{Addrs: []string{srv.Addr}, Timeout: time.Second, Buffer: Buffer{Batch: 500, FixedBatch: true, Local: -1, Prefetch: 0.9}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ids := []int64{first}
	for {
		id, err := c.Next(ctx)
		if err != nil {
			if errors.Is(err, ErrClosed) || ctx.Err() != nil {
				t.Fatalf("after %d IDs: %v", len(ids), err)
			}
			t.Logf("after %d IDs: %v", len(ids), err)
			break
		}
		ids = append(ids, id)
	}
	st := c.IDs().Stats()
	if len(ids) != 500 || st.Fetches < 2 {
		t.Fatalf("%d IDs before the error (want the batch of 500), %+v", len(ids), st)
	}
	assertUnique(t, ids)
}

// TestFailoverAcrossClusterNodes: a client on all three members of a
// cluster keeps issuing when the node it uses is killed; a Strict counter
// keeps strictly increasing across the switch (dropping values of the new
// node at or below the last it handed out).
func TestFailoverAcrossClusterNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	// Put a follower first: killing the leader would leave no node able
	// to allocate segments for about a second, and TRYAGAIN is then the
	// right answer; here the point is the switch.
	rdb := redis.NewClient(&redis.Options{Addr: nodes[0].Addr})
	leader, err := rdb.Do(context.Background(), "CLUSTER", "LEADER").Text()
	rdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(nodes, func(a, b *server) int {
		if a.Addr == leader {
			return 1
		}
		if b.Addr == leader {
			return -1
		}
		return 0
	})
	c := newClient(t, Options{Addrs: addrsOf(nodes), Timeout: 2 * time.Second, Buffer: Buffer{Strict: true, Batch: 50, FixedBatch: true}})
	ctr := c.Counter("orders")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var vals, ids []int64
	take := func(n int) {
		for range n {
			v, err := ctr.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			id, err := c.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			vals, ids = append(vals, v), append(ids, id)
		}
	}
	take(500)
	if nodes[c.cur.Load()].Addr == leader {
		t.Fatal("the client is on the leader")
	}
	nodes[c.cur.Load()].Kill()
	take(2000)
	for i := 1; i < len(vals); i++ {
		if vals[i] <= vals[i-1] {
			t.Fatalf("strict counter went from %d to %d", vals[i-1], vals[i])
		}
		if ids[i] <= ids[i-1] {
			t.Fatalf("strict IDs went from %d to %d", ids[i-1], ids[i])
		}
	}
	assertUnique(t, ids)
	if c.cur.Load() == 0 {
		t.Fatal("the client did not move to another node")
	}
	t.Logf("counter %d..%d, %d values dropped at the switch", vals[0], vals[len(vals)-1], ctr.Stats().Dropped)
}

// TestTryAgainMovesToTheNextNode: a member cut off from its quorum
// answers TRYAGAIN once its worker lease ends; the client moves on to the
// next address and keeps issuing. With only that member, the TRYAGAIN
// reaches the caller.
func TestTryAgainMovesToTheNextNode(t *testing.T) {
	nodes := startCluster(t, 3, "--worker-lease", "2s")
	// A node of another cluster stands in for a healthy member: the point
	// is the switch, not uniqueness across two clusters.
	healthy := startServer(t, "")
	nodes[1].Kill()
	nodes[2].Kill()
	rdb := redis.NewClient(&redis.Options{Addr: nodes[0].Addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	wait.For(t, 20*time.Second, "TRYAGAIN from the cut-off member", func() (bool, string) {
		err := rdb.Do(ctx, "NEXTID").Err()
		return err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN"), fmt.Sprint(err)
	})
	c := newClient(t, Options{Addrs: []string{nodes[0].Addr, healthy.Addr}, Buffer: Buffer{Batch: 10, FixedBatch: true, Local: -1}})
	all, _ := collect(t, 1, 100, c.Next)
	assertUnique(t, all)
	if c.cur.Load() != 1 {
		t.Fatalf("the client stayed on node %d", c.cur.Load())
	}
	alone := newClient(t, Options{Addrs: []string{nodes[0].Addr}})
	if _, err := alone.Next(ctx); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("with only the cut-off member: %v, want TRYAGAIN", err)
	}
}

// TestStrictCounterOrder: with Strict, values leave in the order they are
// taken, so every goroutine sees its values strictly increase; without it,
// values stay unique.
func TestStrictCounterOrder(t *testing.T) {
	srv := startServer(t, "")
	c := newClient(t, Options{Addrs: []string{srv.Addr}, Buffer: Buffer{Strict: true}})
	all, per := collect(t, 4, 5000, c.Counter("strict").Next)
	assertUnique(t, all)
	for _, p := range per {
		for i := 1; i < len(p); i++ {
			if p[i] <= p[i-1] {
				t.Fatalf("strict: %d after %d", p[i], p[i-1])
			}
		}
	}
	loose := newClient(t, Options{Addrs: []string{srv.Addr}})
	all, _ = collect(t, 4, 5000, loose.Counter("strict").Next)
	assertUnique(t, all)
	single, _ := collect(t, 1, 5000, loose.Counter("single").Next)
	if !slices.IsSorted(single) {
		t.Fatal("one goroutine with no other on the counter should see it increase")
	}
}

// TestContextEndsTheWait: a node that accepts and never answers; Next
// returns when its context ends.
func TestContextEndsTheWait(t *testing.T) {
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
			defer conn.Close()
		}
	}()
	c := newClient(t, Options{Addrs: []string{ln.Addr().String()}, Timeout: time.Minute,
		Redis: &redis.Options{MaxRetries: -1, ReadTimeout: time.Minute, ContextTimeoutEnabled: false}})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Next(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Next: %v after %v, want the context's deadline", err, time.Since(start))
	}
}

// TestGeneIDsRouteWithTheBuyer: Gene's IDs carry gene(buyer) as the
// server computes it (GENEOF), for decimal and other buyers.
func TestGeneIDsRouteWithTheBuyer(t *testing.T) {
	srv := startServer(t, "")
	c := newClient(t, Options{Addrs: []string{srv.Addr}})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	var all []int64
	for _, buyer := range []string{"0", "12345", "buyer-42", "007", "9223372036854775807", "ä"} {
		gene, err := rdb.Do(ctx, "GENEOF", buyer).Int64()
		if err != nil {
			t.Fatal(err)
		}
		for range 300 {
			id, err := c.Gene(ctx, buyer)
			if err != nil {
				t.Fatal(err)
			}
			if id%256 != gene {
				t.Fatalf("Gene(%q) = %d, gene %d, want %d", buyer, id, id%256, gene)
			}
			all = append(all, id)
		}
	}
	assertUnique(t, all)
}

// TestUUIDv7FromTheClient: UUIDs from one node strictly increase and are
// valid version 7 UUIDs.
func TestUUIDv7FromTheClient(t *testing.T) {
	srv := startServer(t, "")
	c := newClient(t, Options{Addrs: []string{srv.Addr}, Buffer: Buffer{Batch: 50}})
	prev := ""
	for range 500 {
		u, err := c.UUIDv7(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := engine.ParseUUIDv7([]byte(u)); err != nil || u <= prev {
			t.Fatalf("%q after %q: %v", u, prev, err)
		}
		prev = u
	}
}

// TestAuthAndTLS: a server with --requirepass and TLS; the client passes
// both through its go-redis template; a wrong password is an error, not a
// loop over the nodes.
func TestAuthAndTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, pool := testproc.SelfSigned(t, dir)
	serverTLS = &tls.Config{RootCAs: pool}
	defer func() { serverTLS = nil }()
	srv := startServer(t, "", "--requirepass", "s3cret", "--tls-cert", cert, "--tls-key", key)
	c := newClient(t, Options{Addrs: []string{srv.Addr}, Redis: &redis.Options{Password: "s3cret", TLSConfig: serverTLS, MaxRetries: -1}})
	all, _ := collect(t, 2, 1000, c.Next)
	assertUnique(t, all)
	if _, err := c.Counter("tls").Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	bad := newClient(t, Options{Addrs: []string{srv.Addr}, Redis: &redis.Options{Password: "wrong", TLSConfig: serverTLS, MaxRetries: -1}})
	_, err := bad.Next(context.Background())
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v", err)
	}
	plain := newClient(t, Options{Addrs: []string{srv.Addr}, Timeout: time.Second, Redis: &redis.Options{Password: "s3cret", MaxRetries: -1, DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond}})
	if _, err := plain.Next(context.Background()); err == nil {
		t.Fatal("a plain TCP client got an ID from a TLS server")
	}
}

var _ = fmt.Sprint

// TestClientOnA53BitLayout: against --id-bits 53 (10 ms units, 6 gene
// bits), the client's snowflake IDs (runs) and gene IDs are below 2^53,
// unique, and the gene IDs carry the server's GENEOF in their 6 low bits
// (the client learns the gene bits from INFO).
func TestClientOnA53BitLayout(t *testing.T) {
	srv := startServer(t, "", "--id-bits", "53")
	c := newClient(t, Options{Addrs: []string{srv.Addr}})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	var all []int64
	for range 20000 {
		id, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
	}
	perBuyer := 500 // 1,600 a second per gene; the race detector's sync.Pool wastes many
	if raceEnabled {
		perBuyer = 100
	}
	for _, buyer := range []string{"12345", "buyer-42", "63", "64"} {
		gene, err := rdb.Do(ctx, "GENEOF", buyer).Int64()
		if err != nil || gene >= 64 {
			t.Fatalf("GENEOF %s = %d, %v (6 gene bits)", buyer, gene, err)
		}
		for range perBuyer {
			id, err := c.Gene(ctx, buyer)
			if err != nil {
				t.Fatal(err)
			}
			if id%64 != gene {
				t.Fatalf("Gene(%q) = %d, gene %d, want %d", buyer, id, id%64, gene)
			}
			all = append(all, id)
		}
	}
	for _, id := range all {
		if id <= 0 || id >= 1<<53 {
			t.Fatalf("id %d is not below 2^53", id)
		}
	}
	assertUnique(t, all)
}
