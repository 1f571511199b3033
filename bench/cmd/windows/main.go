// Command windows measures two replicated, durable ways of handing out
// counter values side by side, in interleaved rounds: a window allocator
// on etcd written the way TiDB PD's pkg/id/id.go is (one etcd transaction
// reserves a window of values, handed out from memory under a mutex), and
// idserver's Go client Counter (NEXTSEG) on an idserver cluster, with the
// same window size and the same number of goroutines. It prints a
// markdown table; bench/run starts both clusters and calls it.
//
//	windows -etcd 127.0.0.1:2379,... -idserver 127.0.0.1:6379,... -window 1000 -goroutines 50
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	idclient "idserver/client"
)

func main() {
	etcdEps := flag.String("etcd", "", "etcd client endpoints, comma-separated")
	idAddrs := flag.String("idserver", "", "idserver RESP addresses, comma-separated")
	window := flag.Int("window", 1000, "values per window (PD's DefaultAllocStep is 1000)")
	goroutines := flag.Int("goroutines", 50, "goroutines taking values from each client")
	clients := flag.Int("clients", 1, "clients (allocators) at once, each with -goroutines goroutines")
	duration := flag.Duration("duration", 3*time.Second, "length of each load phase")
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	seq := flag.Int("seq", 200, "windows allocated one after another, per peer and round, for the latency")
	flag.Parse()
	if *etcdEps == "" || *idAddrs == "" {
		fmt.Fprintln(os.Stderr, "windows: -etcd and -idserver are required")
		os.Exit(2)
	}
	cfg := config{
		etcd: strings.Split(*etcdEps, ","), idserver: strings.Split(*idAddrs, ","),
		window: *window, goroutines: *goroutines, clients: *clients, duration: *duration, seq: *seq,
	}
	if err := run(cfg, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "windows:", err)
		os.Exit(1)
	}
}

type config struct {
	etcd, idserver              []string
	window, goroutines, clients int
	duration                    time.Duration
	seq                         int
}

// result is one peer's figures in one round.
type result struct {
	perClient float64         // values per second per client, under load
	loaded    []time.Duration // each window's allocation under load
	single    []time.Duration // each window's allocation, one at a time
	conflicts int64           // etcd: transactions that lost the compare
}

// peer is one way of handing out values.
type peer struct {
	name string
	// newClient makes one client: take hands out one value, and windows
	// returns the latencies of the windows it allocated under load.
	newClient func(ctx context.Context, key string) (take func(context.Context) (uint64, error), windows func() []time.Duration, closeFn func(), err error)
	// single allocates one window and returns how long it took.
	single    func(ctx context.Context, key string) (time.Duration, error)
	conflicts func() int64
}

func run(cfg config, rounds int) error {
	ctx := context.Background()
	ecli, err := clientv3.New(clientv3.Config{Endpoints: cfg.etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer ecli.Close()
	rdb := redis.NewClient(&redis.Options{Addr: cfg.idserver[0]})
	defer rdb.Close()

	var conflicts atomic.Int64
	etcdPeer := peer{
		name: "etcd window allocator (PD's way)",
		newClient: func(ctx context.Context, key string) (func(context.Context) (uint64, error), func() []time.Duration, func(), error) {
			a := &etcdAllocator{cli: ecli, key: key, step: uint64(cfg.window), conflicts: &conflicts}
			return a.Alloc, a.latencies, func() {}, nil
		},
		single: func(ctx context.Context, key string) (time.Duration, error) {
			a := &etcdAllocator{cli: ecli, key: key, step: uint64(cfg.window), conflicts: &conflicts}
			a.mu.Lock()
			defer a.mu.Unlock()
			start := time.Now()
			err := a.rebaseLocked(ctx)
			return time.Since(start), err
		},
		conflicts: func() int64 { return conflicts.Swap(0) },
	}
	idPeer := peer{
		name: "idserver Counter (idclient, NEXTSEG)",
		newClient: func(ctx context.Context, key string) (func(context.Context) (uint64, error), func() []time.Duration, func(), error) {
			c, err := idclient.New(idclient.Options{Addrs: cfg.idserver, Buffer: idclient.Buffer{Batch: cfg.window, MaxBatch: cfg.window, FixedBatch: true}})
			if err != nil {
				return nil, nil, nil, err
			}
			ctr := c.Counter(key)
			// The Counter does not report its requests' times: a probe
			// sends the same request (NEXTSEG key window) to the same node
			// every 10 ms while the goroutines take values.
			probeCtx, stop := context.WithCancel(ctx)
			var mu sync.Mutex
			var lat []time.Duration
			done := make(chan struct{})
			go func() {
				defer close(done)
				t := time.NewTicker(10 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-probeCtx.Done():
						return
					case <-t.C:
					}
					start := time.Now()
					if err := rdb.Do(probeCtx, "NEXTSEG", key+"-probe", cfg.window).Err(); err != nil {
						continue
					}
					mu.Lock()
					lat = append(lat, time.Since(start))
					mu.Unlock()
				}
			}()
			take := func(ctx context.Context) (uint64, error) {
				v, err := ctr.Next(ctx)
				return uint64(v), err
			}
			windows := func() []time.Duration {
				stop()
				<-done
				mu.Lock()
				defer mu.Unlock()
				return lat
			}
			return take, windows, func() { stop(); <-done; c.Close() }, nil
		},
		single: func(ctx context.Context, key string) (time.Duration, error) {
			start := time.Now()
			err := rdb.Do(ctx, "NEXTSEG", key, cfg.window).Err()
			return time.Since(start), err
		},
		conflicts: func() int64 { return 0 },
	}
	peers := []peer{etcdPeer, idPeer}
	results := make([][]result, len(peers))
	for round := range rounds {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			key := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), round)
			r, err := measure(ctx, cfg, peers[i], key)
			if err != nil {
				return fmt.Errorf("%s: %w", peers[i].name, err)
			}
			fmt.Fprintf(os.Stderr, "  round %d %-38s %9.0f values/s per client, window p50 %v p99 %v (one at a time %v), %d conflicts\n",
				round+1, peers[i].name, r.perClient, pct(r.loaded, 50), pct(r.loaded, 99), pct(r.single, 50), r.conflicts)
			results[i] = append(results[i], r)
		}
	}
	fmt.Printf("| peer | values/s per client | rounds | window p50 / p99 under load | window p50 / p99 one at a time | lost compares |\n")
	fmt.Printf("|---|---:|---:|---:|---:|---:|\n")
	for i, p := range peers {
		var rates []float64
		var loaded, single []time.Duration
		var lost int64
		for _, r := range results[i] {
			rates = append(rates, r.perClient)
			loaded = append(loaded, r.loaded...)
			single = append(single, r.single...)
			lost += r.conflicts
		}
		sorted := slices.Clone(rates)
		slices.Sort(sorted)
		fmt.Printf("| %s | %.0f | %.0f to %.0f | %s / %s | %s / %s | %d |\n", p.name, sorted[(len(sorted)-1)/2], sorted[0], sorted[len(sorted)-1],
			ms(pct(loaded, 50)), ms(pct(loaded, 99)), ms(pct(single, 50)), ms(pct(single, 99)), lost)
	}
	// The ratio of the rounds' rates, round by round (the same round ran both).
	var ratios []float64
	for r := range results[0] {
		ratios = append(ratios, results[1][r].perClient/results[0][r].perClient)
	}
	sorted := slices.Clone(ratios)
	slices.Sort(sorted)
	fmt.Printf("\nidserver Counter / etcd allocator, values/s per client: **%.2f** (rounds %.2f to %.2f)\n", sorted[(len(sorted)-1)/2], sorted[0], sorted[len(sorted)-1])
	return nil
}

// measure runs one peer: cfg.clients clients of cfg.goroutines goroutines
// each take values for cfg.duration; then cfg.seq windows one at a time.
func measure(ctx context.Context, cfg config, p peer, key string) (result, error) {
	var res result
	type client struct {
		take    func(context.Context) (uint64, error)
		windows func() []time.Duration
		close   func()
	}
	cs := make([]client, cfg.clients)
	for i := range cs {
		take, windows, closeFn, err := p.newClient(ctx, key)
		if err != nil {
			return res, err
		}
		cs[i] = client{take, windows, closeFn}
	}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	loadCtx, cancel := context.WithTimeout(ctx, cfg.duration+30*time.Second)
	defer cancel()
	var stop atomic.Bool
	var total atomic.Int64
	errs := make(chan error, cfg.clients*cfg.goroutines)
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range cs {
		for range cfg.goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var n int64
				var last uint64
				for !stop.Load() {
					v, err := c.take(loadCtx)
					if err != nil {
						errs <- err
						break
					}
					if v == 0 {
						errs <- fmt.Errorf("value 0 after %d", last)
						break
					}
					last = v
					n++
				}
				total.Add(n)
			}()
		}
	}
	time.Sleep(cfg.duration)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	res.perClient = float64(total.Load()) / elapsed.Seconds() / float64(cfg.clients)
	for _, c := range cs {
		res.loaded = append(res.loaded, c.windows()...)
	}
	for range cfg.seq {
		d, err := p.single(ctx, key+"-single")
		if err != nil {
			return res, err
		}
		res.single = append(res.single, d)
	}
	res.conflicts = p.conflicts()
	return res, nil
}

// etcdAllocator is PD's allocator (tikv/pd pkg/id/id.go) reduced to what
// a client of etcd needs: values base+1..end are handed out from memory
// under the mutex; when they are gone, rebaseLocked reads the key's end
// and moves it step further in one transaction that compares the value
// read (or that the key does not exist yet), and the window is the step
// below the new end. PD also compares its leader key, so that only the
// leader allocates; here any number of clients share the key, and a
// transaction that loses the compare is counted and tried again.
type etcdAllocator struct {
	cli       *clientv3.Client
	key       string
	step      uint64
	conflicts *atomic.Int64

	mu        sync.Mutex
	base, end uint64
	lat       []time.Duration
}

// Alloc returns the next value.
func (a *etcdAllocator) Alloc(ctx context.Context) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.base == a.end {
		start := time.Now()
		if err := a.rebaseLocked(ctx); err != nil {
			return 0, err
		}
		a.lat = append(a.lat, time.Since(start))
	}
	a.base++
	return a.base, nil
}

func (a *etcdAllocator) latencies() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lat
}

// rebaseLocked reserves the next window, or leaves the allocator as it
// was when its transaction lost the compare (Alloc tries again).
func (a *etcdAllocator) rebaseLocked(ctx context.Context) error {
	got, err := a.cli.Get(ctx, a.key)
	if err != nil {
		return err
	}
	var cmp clientv3.Cmp
	var end uint64
	if len(got.Kvs) == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)
	} else {
		old := got.Kvs[0].Value
		if len(old) != 8 {
			return fmt.Errorf("etcd key %s holds %d bytes, not 8", a.key, len(old))
		}
		end = binary.BigEndian.Uint64(old)
		cmp = clientv3.Compare(clientv3.Value(a.key), "=", string(old))
	}
	end += a.step
	var val [8]byte
	binary.BigEndian.PutUint64(val[:], end)
	resp, err := a.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(a.key, string(val[:]))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		a.conflicts.Add(1)
		return nil
	}
	a.base, a.end = end-a.step, end
	return nil
}

// pct is the p-th percentile of ds (0 when empty).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}
