package idclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/engine"
)

// Errors of the client.
var (
	// ErrClosed: the Client was closed; no buffered value is handed out
	// after Close.
	ErrClosed = errors.New("idclient: closed")
	// ErrNoAddrs: Options.Addrs is empty.
	ErrNoAddrs = errors.New("idclient: no server address")
	// ErrOrderRestarted: a Strict sequence of IDs got only IDs at or below
	// the last one it handed out for longer than a failover explains
	// (strictRestartAfter): the node's clock went back further than it
	// could borrow and it took a fresh worker ID, whose IDs start from its
	// clock (docs/guarantees.md, promise 2). The IDs stay unique; the order restarts. The
	// next call hands out IDs increasing from the new start.
	ErrOrderRestarted = errors.New("idclient: the server's ID order restarted (its clock went back and it took a fresh worker ID)")
)

// Options configure a Client.
type Options struct {
	// Addrs are the RESP addresses of the nodes, any number of a cluster's
	// members. Requests go to one node, and move on to the next when it
	// fails (a connection error, TRYAGAIN, CLOCKBACK, LOADING).
	Addrs []string
	// Redis is the template for each node's go-redis client: Username,
	// Password, TLSConfig, pool and socket timeouts. Addr is ignored. nil:
	// defaults with MaxRetries -1 (the Client moves to the next node
	// instead of retrying the same one).
	Redis *redis.Options
	// Buffer switches the buffering levels; the zero value turns every
	// level on with the defaults.
	Buffer Buffer
	// MaxAge is the freshness bound of snowflake and gene IDs: an ID is
	// dropped, never handed out, once this long has passed since it was
	// requested, so the time inside an ID is at most MaxAge (plus the
	// request's round trip) older than the moment it is used. Default 1s;
	// segment values and UUIDs carry no time that matters and do not age.
	MaxAge time.Duration
	// Timeout bounds one request to the server, all nodes tried; 5s when 0.
	Timeout time.Duration
}

// Buffer switches the buffering levels one by one (the benchmarks measure
// each). The zero value is the full client.
type Buffer struct {
	// Batch is the first batch size, and the smallest the adaptive size
	// goes to; 1 with FixedBatch asks for one value per request. Default
	// 128, and 16 for each gene's IDs.
	Batch int
	// MaxBatch is the largest batch (NEXTIDRUNS, NEXTID and GENEID take
	// at most 10000); default 10000.
	MaxBatch int
	// FixedBatch keeps Batch instead of following the rate.
	FixedBatch bool
	// Period is how long a batch should last: the next batch doubles when
	// one lasted under Period/2 and halves past 4*Period. Default 100ms.
	Period time.Duration
	// Prefetch is the low-water mark, a fraction of the batch: when the
	// process buffer falls below it, the next batch is requested in the
	// background. Default 0.5; negative: no prefetch (a request only when
	// the buffer is empty).
	Prefetch float64
	// NoSingleflight lets every caller that finds the buffer empty send
	// its own request, instead of all of them waiting on one.
	NoSingleflight bool
	// Local is how many values a P takes from the process buffer into its
	// own cache (through a sync.Pool), so that most takes touch no lock.
	// Default 128 (a take from the process buffer costs a lock and a
	// clock read; values move as runs, so a larger take costs no more);
	// negative: no per-P cache.
	Local int
	// NoRuns asks NEXTID n (GENEID g n), an array of n IDs, instead of
	// NEXTIDRUNS n (GENEIDRUNS g n), which answers the same IDs as a few
	// runs [first, last]: the client then parses an integer per ID (the
	// benchmarks compare the two).
	NoRuns bool
	// Strict hands values out in the order they are taken from the process
	// buffer, strictly increasing: no per-P cache, and a value at or below
	// one already handed out (a batch from another node after a failover)
	// is dropped.
	Strict bool
}

func (b Buffer) withDefaults() Buffer {
	if b.Batch <= 0 {
		b.Batch = 128
	}
	if b.MaxBatch <= 0 {
		b.MaxBatch = 10000
	}
	b.MaxBatch = max(b.MaxBatch, b.Batch)
	if b.Period <= 0 {
		b.Period = 100 * time.Millisecond
	}
	if b.Prefetch == 0 {
		b.Prefetch = 0.5
	}
	if b.Local == 0 {
		b.Local = defaultLocal
	}
	if b.Strict {
		b.Local = -1
	}
	return b
}

// Client issues IDs from idserver nodes through buffers. It is safe for
// concurrent use.
type Client struct {
	opt   Options
	nodes []*redis.Client
	cur   atomic.Int64 // the node requests go to first
	// noRuns: a node answered NEXTIDRUNS with an unknown command (a
	// server from before it); NEXTID n from then on. noGeneRuns: the
	// same for GENEIDRUNS.
	noRuns     atomic.Bool
	noGeneRuns atomic.Bool

	ids *Sequence

	// coarse is time.Since(start) in ns, stored by a ticker every
	// MaxAge/100 (1ms..100ms) and at every take from a process buffer;
	// per-P caches check MaxAge against it.
	start      time.Time
	coarse     atomic.Int64
	stopTicker chan struct{}

	fetching sync.WaitGroup // requests in flight, waited for (briefly) by Close

	mu    sync.Mutex
	genes map[uint32]*Sequence
	// geneTable finds a gene's Sequence without c.mu once the layout is
	// known (gene bits <= maxGeneTableBits); genes stays the owner.
	geneTable atomic.Pointer[geneTable]
	counters  map[string]*Sequence
	layout    *engine.Layout // gene bits, learnt from INFO snowflake
	closed    bool

	uuidMu  sync.Mutex
	uuidBuf []string
}

// New connects to the nodes in opts.Addrs (lazily, as go-redis does).
func New(opts Options) (*Client, error) {
	if len(opts.Addrs) == 0 {
		return nil, ErrNoAddrs
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	c := &Client{opt: opts, genes: map[uint32]*Sequence{}, counters: map[string]*Sequence{},
		start: time.Now(), stopTicker: make(chan struct{})}
	go c.tick(min(max(opts.MaxAge/100, time.Millisecond), 100*time.Millisecond))
	for _, addr := range opts.Addrs {
		o := redis.Options{MaxRetries: -1}
		if opts.Redis != nil {
			o = *opts.Redis
		}
		o.Addr = addr
		c.nodes = append(c.nodes, redis.NewClient(&o))
	}
	c.ids = newSequence(c, c.fetchNextIDs(), opts.Buffer, opts.MaxAge, engineMaxCount)
	c.ids.orderRestarts = true
	return c, nil
}

// tick keeps the coarse clock until Close.
func (c *Client) tick(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			c.coarse.Store(int64(now.Sub(c.start)))
		case <-c.stopTicker:
			return
		}
	}
}

// coarseNow is the coarse clock: ns since start, behind by at most a tick
// (more when the process is starved of CPU).
func (c *Client) coarseNow() int64 { return c.coarse.Load() }

// defaultLocal is Buffer.Local's default.
const defaultLocal = 128

// closeGrace is how long Close waits for requests in flight.
const closeGrace = 200 * time.Millisecond

// geneBatch is a gene's first batch when Buffer.Batch is not set: a
// process may use all 2^gene-bits genes, each with its own buffer, and a
// busy gene's batch grows.
const geneBatch = 16

// engineMaxCount is the largest count NEXTID, GENEID and UUIDV7 take.
const engineMaxCount = 10000

// IDs is the snowflake ID sequence (NEXTIDRUNS, or NEXTID; see
// Buffer.NoRuns).
func (c *Client) IDs() *Sequence { return c.ids }

// Next returns a snowflake ID: c.IDs().Next(ctx).
func (c *Client) Next(ctx context.Context) (int64, error) { return c.ids.Next(ctx) }

// Gene returns an ID carrying gene(buyer) in its low bits (GENEID), so
// that it routes to the buyer's shard. IDs are buffered per gene; the
// first call asks the server for its layout.
func (c *Client) Gene(ctx context.Context, buyer string) (int64, error) {
	s, err := c.geneSequence(ctx, buyer)
	if err != nil {
		return 0, err
	}
	return s.Next(ctx)
}

// geneTable is a gene-indexed table of the gene Sequences made so far.
type geneTable struct {
	layout *engine.Layout
	seqs   []atomic.Pointer[Sequence]
}

// maxGeneTableBits bounds the table: 2^12 pointers; more gene bits use
// the map under c.mu.
const maxGeneTableBits = 12

func (c *Client) geneSequence(ctx context.Context, buyer string) (*Sequence, error) {
	if t := c.geneTable.Load(); t != nil {
		if s := t.seqs[t.layout.GeneOfString(buyer)].Load(); s != nil {
			return s, nil
		}
	}
	c.mu.Lock()
	layout := c.layout
	c.mu.Unlock()
	if layout == nil {
		l, err := c.learnLayout(ctx)
		if err != nil {
			return nil, err
		}
		layout = l
	}
	gene := layout.GeneOfString(buyer)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.layout = layout
	t := c.geneTable.Load()
	if t == nil && layout.GeneBits <= maxGeneTableBits {
		t = &geneTable{layout: layout, seqs: make([]atomic.Pointer[Sequence], 1<<layout.GeneBits)}
		c.geneTable.Store(t)
	}
	s := c.genes[gene]
	if s == nil {
		// The decimal gene number is a buyer whose gene is itself.
		buf := c.opt.Buffer
		if buf.Batch <= 0 {
			buf.Batch = geneBatch
		}
		s = newSequence(c, c.fetchGeneIDs(strconv.FormatUint(uint64(gene), 10), int64(1)<<layout.GeneBits), buf, c.opt.MaxAge, geneBatchMax(layout))
		s.orderRestarts = true
		c.genes[gene] = s
	}
	if t != nil {
		t.seqs[gene].Store(s)
	}
	return s, nil
}

// learnLayout reads the gene bits from INFO snowflake, and the sequence
// bits and time unit when the server names them (geneBatchMax).
func (c *Client) learnLayout(ctx context.Context) (*engine.Layout, error) {
	var info string
	err := c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
		var err error
		info, err = rdb.Info(ctx, "snowflake").Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	var l *engine.Layout
	unitMS := 0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "time_unit_ms:"); ok {
			unitMS, _ = strconv.Atoi(v)
		}
		_, layout, ok := strings.Cut(line, "layout:")
		if !ok {
			continue
		}
		var seqBits int
		for _, field := range strings.Split(layout, ",") {
			if v, ok := strings.CutPrefix(field, "seq-bits="); ok {
				seqBits, _ = strconv.Atoi(v)
			}
			if v, ok := strings.CutPrefix(field, "gene-bits="); ok {
				bits, err := strconv.Atoi(v)
				if err != nil || bits < 0 || bits > 62 {
					return nil, fmt.Errorf("idclient: INFO snowflake: bad gene-bits %q", v)
				}
				l = &engine.Layout{GeneBits: bits}
			}
		}
		if l != nil && seqBits >= l.GeneBits && seqBits <= 22 {
			l.SeqBits = seqBits
		}
	}
	if l == nil {
		return nil, errors.New("idclient: INFO snowflake has no layout with gene-bits")
	}
	if unitMS > 0 && unitMS <= 1000 {
		l.Unit = time.Duration(unitMS) * time.Millisecond
	}
	return l, nil
}

// geneBatchMax bounds a gene's batch to about 100 ms of the gene's IDs
// (2^(seq-bits - gene-bits) per time unit): one gene gets only that many
// IDs per unit on a node, and a batch far beyond it would have the server
// borrow and then wait for the clock (GENEIDRUNS 10000 of one gene is 6 s
// of ID time with --id-bits 53). A server that does not name its
// sequence bits gets the command's limit.
func geneBatchMax(l *engine.Layout) int {
	if l.SeqBits == 0 {
		return engineMaxCount
	}
	perUnit := 1 << (l.SeqBits - l.GeneBits)
	units := max(1, int(100/l.UnitMS()))
	return min(max(perUnit*units, geneBatch), engineMaxCount)
}

// Counter is the sequence of a tag's segment values (NEXTSEG), one per
// tag for the Client's life.
func (c *Client) Counter(tag string) *Sequence {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.counters[tag]
	if s == nil {
		s = newSequence(c, c.fetchSegment(tag), c.opt.Buffer, 0, 1_000_000_000)
		if c.closed {
			s.close()
		}
		c.counters[tag] = s
	}
	return s
}

// UUIDv7 returns an RFC 9562 UUIDv7 string from the server (UUIDV7),
// buffered in batches of Buffer.Batch, strictly increasing as long as
// they come from one node.
func (c *Client) UUIDv7(ctx context.Context) (string, error) {
	c.uuidMu.Lock()
	defer c.uuidMu.Unlock()
	if c.ids.closed.Load() {
		return "", ErrClosed
	}
	if len(c.uuidBuf) == 0 {
		n := min(c.opt.Buffer.withDefaults().Batch, engineMaxCount)
		err := c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
			var err error
			c.uuidBuf, err = rdb.Do(ctx, "UUIDV7", n).StringSlice()
			return err
		})
		if err != nil {
			return "", err
		}
	}
	u := c.uuidBuf[0]
	c.uuidBuf = c.uuidBuf[1:]
	return u, nil
}

// Close drops every buffered value and closes the connections. After it
// returns, Next, Gene and UUIDv7 answer ErrClosed; a value buffered before
// is never handed out.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		close(c.stopTicker)
	}
	c.closed = true
	seqs := []*Sequence{c.ids}
	for _, s := range c.genes {
		seqs = append(seqs, s)
	}
	for _, s := range c.counters {
		seqs = append(seqs, s)
	}
	c.mu.Unlock()
	for _, s := range seqs {
		s.close()
	}
	// Let requests in flight end before their connections close (go-redis
	// logs a connection closed under a request), but not for long: a
	// request to a hung node ends only at Options.Timeout.
	ended := make(chan struct{})
	go func() {
		c.fetching.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(closeGrace):
	}
	c.uuidMu.Lock()
	c.uuidBuf = nil
	c.uuidMu.Unlock()
	var first error
	for _, n := range c.nodes {
		if err := n.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// fetchIDs requests n IDs with cmd args... n, an array of IDs.
func (c *Client) fetchIDs(cmd string, args ...string) fetchFunc {
	return func(ctx context.Context, n int) (chunk, error) {
		born := time.Now()
		var ids []int64
		err := c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
			a := make([]any, 0, len(args)+2)
			a = append(a, cmd)
			for _, x := range args {
				a = append(a, x)
			}
			r := redis.NewIntSliceCmd(ctx, append(a, n)...)
			_ = rdb.Process(ctx, r)
			var err error
			ids, err = r.Result()
			return err
		})
		if err == nil && len(ids) == 0 {
			err = fmt.Errorf("idclient: %s answered no IDs", cmd)
		}
		if err != nil {
			return chunk{}, err
		}
		return chunk{runs: appendRuns(nil, ids), size: len(ids), born: born}, nil
	}
}

// fetchNextIDs requests n snowflake IDs as runs (NEXTIDRUNS n), or as a
// list (NEXTID n) with Buffer.NoRuns or once a node did not know
// NEXTIDRUNS.
func (c *Client) fetchNextIDs() fetchFunc {
	list := c.fetchIDs("NEXTID")
	if c.opt.Buffer.NoRuns {
		return list
	}
	return func(ctx context.Context, n int) (chunk, error) {
		if c.noRuns.Load() {
			return list(ctx, n)
		}
		born := time.Now()
		var reply []int64
		err := c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
			r := redis.NewIntSliceCmd(ctx, "NEXTIDRUNS", n)
			_ = rdb.Process(ctx, r)
			var err error
			reply, err = r.Result()
			return err
		})
		if err != nil && strings.HasPrefix(err.Error(), "ERR unknown command") {
			c.noRuns.Store(true)
			return list(ctx, n)
		}
		if err != nil {
			return chunk{}, err
		}
		runs, err := parseRuns(reply)
		if err != nil {
			return chunk{}, err
		}
		return chunk{runs: runs, size: int(countOf(runs)), born: born}, nil
	}
}

// parseRuns reads NEXTIDRUNS's reply: first1, last1, first2, last2, ...,
// runs increasing.
func parseRuns(reply []int64) ([]run, error) { return parseStepRuns("NEXTIDRUNS", reply, 1) }

// parseStepRuns reads a runs reply whose runs hold first, first+step, ...,
// last (GENEIDRUNS: step 2^gene-bits).
func parseStepRuns(cmd string, reply []int64, step int64) ([]run, error) {
	if len(reply)%2 != 0 {
		return nil, fmt.Errorf("idclient: %s answered %d integers, not pairs", cmd, len(reply))
	}
	runs := make([]run, 0, len(reply)/2)
	for i := 0; i < len(reply); i += 2 {
		first, last := reply[i], reply[i+1]
		if first > last || (last-first)%step != 0 || (len(runs) > 0 && first <= runs[len(runs)-1].last()) {
			return nil, fmt.Errorf("idclient: %s answered run %d..%d (step %d) after %v", cmd, first, last, step, runs)
		}
		runs = append(runs, run{next: first, step: step, count: (last-first)/step + 1})
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("idclient: %s answered no IDs", cmd)
	}
	return runs, nil
}

// fetchGeneIDs requests n IDs of gene as runs step apart (GENEIDRUNS gene
// n), or as a list (GENEID gene n) with Buffer.NoRuns or once a node did
// not know GENEIDRUNS.
func (c *Client) fetchGeneIDs(gene string, step int64) fetchFunc {
	list := c.fetchIDs("GENEID", gene)
	if c.opt.Buffer.NoRuns {
		return list
	}
	return func(ctx context.Context, n int) (chunk, error) {
		if c.noGeneRuns.Load() {
			return list(ctx, n)
		}
		born := time.Now()
		var reply []int64
		err := c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
			r := redis.NewIntSliceCmd(ctx, "GENEIDRUNS", gene, n)
			_ = rdb.Process(ctx, r)
			var err error
			reply, err = r.Result()
			return err
		})
		if err != nil && strings.HasPrefix(err.Error(), "ERR unknown command") {
			c.noGeneRuns.Store(true)
			return list(ctx, n)
		}
		if err != nil {
			return chunk{}, err
		}
		runs, err := parseStepRuns("GENEIDRUNS", reply, step)
		if err != nil {
			return chunk{}, err
		}
		return chunk{runs: runs, size: int(countOf(runs)), born: born}, nil
	}
}

// fetchSegment requests n values of tag with NEXTSEG.
func (c *Client) fetchSegment(tag string) fetchFunc {
	return func(ctx context.Context, n int) (chunk, error) {
		born := time.Now()
		var seg []int64
		err := c.do(ctx, func(ctx context.Context, rdb *redis.Client) error {
			r := redis.NewIntSliceCmd(ctx, "NEXTSEG", tag, n)
			_ = rdb.Process(ctx, r)
			var err error
			seg, err = r.Result()
			return err
		})
		if err == nil && (len(seg) != 2 || seg[1] < seg[0]) {
			err = fmt.Errorf("idclient: NEXTSEG answered %v", seg)
		}
		if err != nil {
			return chunk{}, err
		}
		r := run{next: seg[0], step: 1, count: seg[1] - seg[0] + 1}
		return chunk{runs: []run{r}, size: int(r.count), born: born}, nil
	}
}

// do runs one request on the current node, moving on to the next node
// while the error is one another node may not have.
func (c *Client) do(ctx context.Context, req func(context.Context, *redis.Client) error) error {
	start := c.cur.Load()
	var err error
	for i := range int64(len(c.nodes)) {
		k := (start + i) % int64(len(c.nodes))
		if err = req(ctx, c.nodes[k]); err == nil {
			if i > 0 {
				c.cur.CompareAndSwap(start, k)
			}
			return nil
		}
		if !nodeFailure(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// nodeFailure tells whether err belongs to the node rather than the
// request: a connection error, or TRYAGAIN (no lease, no leader),
// CLOCKBACK (its clock) or LOADING (starting).
func nodeFailure(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) {
		msg := rerr.Error()
		return strings.HasPrefix(msg, "TRYAGAIN") || strings.HasPrefix(msg, "CLOCKBACK") || strings.HasPrefix(msg, "LOADING")
	}
	return true
}
