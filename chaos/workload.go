package chaos

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// opTimeout is how long a client waits for one reply before it counts the
// outcome as unknown and drops the connection.
const opTimeout = 3 * time.Second

// hotBuyer is the buyer every client orders for now and then.
const hotBuyer = "42"

// tags are the segment tags every campaign uses: one hot, a few cold.
var tags = []string{"orders", "t1", "t2", "t3"}

// maxManyTags bounds Config.ManyTags.
const maxManyTags = 200_000

// tagSet is the tags a campaign's clients touch: tags, byte tags whose
// names are random bytes (NUL, CR LF, spaces, invalid UTF-8, up to 256
// bytes), and many: cold tags each touched a few times at most.
type tagSet struct {
	bytes []string
	many  []string
}

// newTagSet draws the byte tags and many tags (every seventh of them a
// byte name too) from seed.
func newTagSet(seed uint64, many int) *tagSet {
	rng := rand.New(rand.NewPCG(seed, 0x7a65))
	ts := &tagSet{bytes: []string{"\x00", "a b", "\r\n", "\xff\xfe\xfd", "\x00\r\n \xc3\x28", "$3\r\nSET\r\n", "*1\r\n"}}
	seen := map[string]bool{}
	for _, t := range append(slices.Clone(tags), ts.bytes...) {
		seen[t] = true
	}
	randomName := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	for len(ts.bytes) < 16 {
		n := 1 + rng.IntN(40)
		if len(ts.bytes) == 15 {
			n = 256 // the longest a tag may be
		}
		if t := randomName(n); !seen[t] {
			seen[t] = true
			ts.bytes = append(ts.bytes, t)
		}
	}
	for i := range min(many, maxManyTags) {
		t := "m" + strconv.Itoa(i)
		if i%7 == 3 {
			// Random bytes, then the index: distinct from every other name.
			t = randomName(1+rng.IntN(24)) + "\x00" + strconv.Itoa(i)
		}
		ts.many = append(ts.many, t)
	}
	return ts
}

// pick draws a tag: the hot one two times in three, else a cold one, a
// byte tag or one of the many.
func (ts *tagSet) pick(rng *rand.Rand) string {
	if rng.IntN(3) != 0 {
		return tags[0]
	}
	switch w := rng.IntN(10); {
	case w < 2:
		return ts.bytes[rng.IntN(len(ts.bytes))]
	case w < 5 && len(ts.many) > 0:
		return ts.many[rng.IntN(len(ts.many))]
	default:
		return tags[1+rng.IntN(len(tags)-1)]
	}
}

// opSpec is one operation as the schedule draws it, before it is sent.
type opSpec struct {
	kind  Kind
	key   string
	n     int64 // 0: NEXTID/GENEID without a count
	lower bool  // SET below a value already issued
}

// drawOp draws the next operation of a client's schedule. Everything but
// the SET values (which depend on what the cluster answered) follows from
// the client's random stream, so a seed replays the same mix.
func drawOp(rng *rand.Rand, step int64, ts *tagSet) opSpec {
	tag := ts.pick(rng)
	switch w := rng.IntN(100); {
	case w < 18:
		return opSpec{kind: KNextID}
	case w < 28:
		n := int64(1 + rng.IntN(100))
		if rng.IntN(200) == 0 {
			n = 10000 // saturates the millisecond: must wait, not CLOCKBACK
		}
		return opSpec{kind: KNextID, n: n}
	case w < 36:
		buyer := strconv.FormatUint(rng.Uint64N(1e12), 10)
		if rng.IntN(3) == 0 {
			buyer = "b-" + strconv.FormatUint(rng.Uint64(), 36)
		}
		n := int64(0)
		if rng.IntN(3) == 0 {
			n = int64(1 + rng.IntN(50))
		}
		return opSpec{kind: KGeneID, key: buyer, n: n}
	case w < 44:
		n := int64(0)
		if rng.IntN(3) == 0 {
			n = int64(1 + rng.IntN(200))
		}
		return opSpec{kind: KGeneID, key: hotBuyer, n: n}
	case w < 66:
		return opSpec{kind: KIncr, key: tag}
	case w < 75:
		return opSpec{kind: KIncrBy, key: tag, n: 1 + rng.Int64N(step-1)}
	case w < 80:
		return opSpec{kind: KIncrBy, key: tag, n: step + 1 + rng.Int64N(4*step)}
	case w < 88:
		return opSpec{kind: KNextSeg, key: tag, n: 1 + rng.Int64N(3*step)}
	case w < 91:
		return opSpec{kind: KSet, key: tag, n: 1 + rng.Int64N(100_000)}
	case w < 93:
		return opSpec{kind: KSet, key: tag, lower: true, n: rng.Int64N(1 << 40)}
	case w < 96:
		return opSpec{kind: KGet, key: tag}
	case w < 99:
		return opSpec{kind: KExec, n: 1 + rng.Int64N(4)}
	default:
		return opSpec{kind: KDiscard, n: 1 + rng.Int64N(3)}
	}
}

// drawQueued draws a command queued inside MULTI.
func drawQueued(rng *rand.Rand, step int64, ts *tagSet) opSpec {
	tag := ts.pick(rng)
	switch w := rng.IntN(100); {
	case w < 30:
		return opSpec{kind: KIncr, key: tag}
	case w < 50:
		return opSpec{kind: KIncrBy, key: tag, n: 1 + rng.Int64N(step-1)}
	case w < 58:
		return opSpec{kind: KNextSeg, key: tag, n: 1 + rng.Int64N(step)}
	case w < 75:
		n := int64(0)
		if rng.IntN(2) == 0 {
			n = 1 + rng.Int64N(20)
		}
		return opSpec{kind: KNextID, n: n}
	case w < 85:
		return opSpec{kind: KGeneID, key: hotBuyer}
	case w < 95:
		return opSpec{kind: KSet, key: tag, n: 1 + rng.Int64N(100_000)}
	default:
		return opSpec{kind: KGet, key: tag}
	}
}

// knowledge is what clients have seen acknowledged, shared so that SET can
// raise above every value and floor, or try to lower below a value already
// issued (not merely below a floor: SET may lower a tag below a floor when
// no value above it was issued).
type knowledge struct {
	mu     sync.Mutex
	max    map[string]int64 // values issued and floors set
	issued map[string]int64 // values issued
}

// see records a value issued (issued) or a floor set.
func (k *knowledge) see(tag string, v int64, issued bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.max == nil {
		k.max, k.issued = map[string]int64{}, map[string]int64{}
	}
	k.max[tag] = max(k.max[tag], v)
	if issued {
		k.issued[tag] = max(k.issued[tag], v)
	}
}

// get is the largest value issued or floor set (issued false), or the
// largest value issued.
func (k *knowledge) get(tag string, issued bool) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if issued {
		return k.issued[tag]
	}
	return k.max[tag]
}

// workload drives clients against the cluster's slots.
type workload struct {
	seed  uint64
	pm    *procManager
	hist  *History
	t0    time.Time
	step  int64
	tags  *tagSet
	known knowledge
	swept atomic.Int64 // many tags the sweepers have taken
	conns atomic.Int64 // client connections opened
	txs   atomic.Int64 // transactions sent
}

// nodeConn is a client's connection, kept while the node's process is the
// one it was opened to.
type nodeConn struct {
	rc   *respConn
	proc *proc
}

// to returns a connection to p: the one held when it was opened to p,
// else a new one; nil when p cannot be reached.
func (c *nodeConn) to(w *workload, p *proc) *respConn {
	if c.rc != nil && c.proc != p {
		c.drop()
	}
	if c.rc == nil {
		rc, err := dialRESP(p.addr, w.conns.Add(1), 500*time.Millisecond)
		if err != nil {
			return nil
		}
		c.rc, c.proc = rc, p
	}
	return c.rc
}

// drop closes the connection held, if any.
func (c *nodeConn) drop() {
	if c.rc != nil {
		c.rc.close()
		c.rc = nil
	}
}

// client runs one client against slot until ctx ends; id names its random
// stream.
func (w *workload) client(ctx context.Context, id, slot int) {
	rng := rand.New(rand.NewPCG(w.seed, uint64(id)+1<<32))
	var nc nodeConn
	defer nc.drop()
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	for ctx.Err() == nil {
		spec := drawOp(rng, w.step, w.tags)
		p := w.pm.node(slot).running()
		if p == nil {
			pause(20 * time.Millisecond)
			continue
		}
		rc := nc.to(w, p)
		if rc == nil {
			pause(20 * time.Millisecond)
			continue
		}
		var op *Op
		if spec.kind == KExec || spec.kind == KDiscard {
			queued := make([]opSpec, spec.n)
			for i := range queued {
				queued[i] = drawQueued(rng, w.step, w.tags)
			}
			op = w.doTx(rc, p, id, slot, spec.kind, queued)
		} else {
			op = w.do(rc, p, id, slot, spec)
		}
		if op == nil {
			continue
		}
		if op.Outcome == Unknown && op.Err != "" && !strings.HasPrefix(op.Err, "-") {
			nc.drop()
		}
		if op.Outcome != OK {
			pause(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		}
	}
}

// do sends one operation and records it.
func (w *workload) do(rc *respConn, p *proc, client, slot int, spec opSpec) *Op {
	op, args := w.prepare(rc, p, client, slot, spec)
	if op == nil {
		return nil
	}
	op.Start = time.Since(w.t0)
	r, err := rc.do(time.Now().Add(opTimeout), args...)
	op.End = time.Since(w.t0)
	defer w.hist.addOp(op)
	if err != nil {
		op.Outcome, op.Err = Unknown, err.Error()
		return op
	}
	w.settle(op, r)
	return op
}

// prepare makes the op a spec draws and the command that sends it; nil
// when it cannot be sent now (a lowering SET with nothing below it).
func (w *workload) prepare(rc *respConn, p *proc, client, slot int, spec opSpec) (*Op, []string) {
	op := &Op{Client: client, Slot: slot, Node: p.nodeID, Proc: p.gen, Conn: rc.id, Kind: spec.kind, Key: spec.key, N: spec.n, Lower: spec.lower}
	var args []string
	switch spec.kind {
	case KNextID:
		args = []string{"NEXTID"}
	case KGeneID:
		args = []string{"GENEID", spec.key}
	case KIncr:
		args = []string{"INCR", spec.key}
	case KIncrBy:
		args = []string{"INCRBY", spec.key}
	case KNextSeg:
		args = []string{"NEXTSEG", spec.key}
	case KGet:
		args = []string{"GET", spec.key}
	case KSet:
		known := w.known.get(spec.key, spec.lower)
		if spec.lower {
			if known < 2 {
				return nil, nil
			}
			op.N = 1 + spec.n%(known-1) // below a value already acknowledged
		} else {
			op.N = known + spec.n
		}
		args = []string{"SET", spec.key, strconv.FormatInt(op.N, 10)}
	}
	if spec.n > 0 && spec.kind != KSet {
		args = append(args, strconv.FormatInt(spec.n, 10))
	}
	return op, args
}

// settle records reply r in op: its values, or why it has none.
func (w *workload) settle(op *Op, r reply) {
	if r.isError() {
		op.Outcome, op.Err = Refused, "-"+r.str
		if op.Kind == KSet && !strings.HasPrefix(r.str, "ERR values never go back") {
			// The floor may be committed even though this node could not
			// confirm it.
			op.Outcome = Unknown
		}
		return
	}
	bad := func() {
		op.Outcome, op.Err = Unknown, "unexpected reply "+r.String()
	}
	switch op.Kind {
	case KNextID, KGeneID:
		switch {
		case r.kind == ':' && op.N == 0:
			op.IDs = []int64{r.num}
		case r.kind == '*' && op.N > 0:
			ids, err := r.ints()
			if err != nil || int64(len(ids)) != op.N {
				bad()
				return
			}
			op.IDs = ids
		default:
			bad()
		}
	case KIncr, KIncrBy:
		if r.kind != ':' {
			bad()
			return
		}
		op.First, op.Last = r.num, r.num
		if op.Kind == KIncrBy {
			op.First = r.num - op.N + 1
		}
		w.known.see(op.Key, op.Last, true)
	case KNextSeg:
		v, err := r.ints()
		if err != nil || len(v) != 2 {
			bad()
			return
		}
		op.First, op.Last = v[0], v[1]
		w.known.see(op.Key, op.Last, true)
	case KSet:
		if r.kind != '+' || r.str != "OK" {
			bad()
			return
		}
		w.known.see(op.Key, op.N, false)
	case KGet:
		if r.kind != '$' {
			bad()
			return
		}
		if r.null {
			op.Nil = true
			return
		}
		v, err := strconv.ParseInt(r.str, 10, 64)
		if err != nil {
			bad()
			return
		}
		op.Last = v
	}
}

// doTx sends MULTI, the queued commands, and EXEC (or DISCARD, by kind),
// pipelined, and records the transaction and, for EXEC, each queued command
// as an op of its own with EXEC's reply for it: acknowledged when EXEC's
// array holds a value for it, refused when it holds an error or EXEC
// aborted, unknown when EXEC's answer did not come. The commands' times are
// the transaction's: sent with MULTI, answered with EXEC.
func (w *workload) doTx(rc *respConn, p *proc, client, slot int, kind Kind, queued []opSpec) *Op {
	head := &Op{Client: client, Slot: slot, Node: p.nodeID, Proc: p.gen, Conn: rc.id, Kind: kind, Tx: w.txs.Add(1)}
	var ops []*Op
	cmds := [][]string{{"MULTI"}}
	for _, spec := range queued {
		op, args := w.prepare(rc, p, client, slot, spec)
		if op == nil {
			continue
		}
		op.Tx = head.Tx
		ops = append(ops, op)
		cmds = append(cmds, args)
	}
	head.N = int64(len(ops))
	if kind == KExec {
		cmds = append(cmds, []string{"EXEC"})
	} else {
		cmds = append(cmds, []string{"DISCARD"})
		ops = nil // nothing queued runs: no op of theirs goes in the history
	}
	head.Start = time.Since(w.t0)
	replies, err := rc.pipeline(time.Now().Add(opTimeout), cmds)
	head.End = time.Since(w.t0)
	defer func() {
		w.hist.addOp(head)
		for _, op := range ops {
			op.Start, op.End = head.Start, head.End
			if op.Outcome == Unknown && op.Err == "" {
				op.Err = "the transaction's outcome is unknown"
			}
			w.hist.addOp(op)
		}
	}()
	for _, op := range ops {
		op.Outcome = Unknown
	}
	if err != nil {
		head.Outcome, head.Err = Unknown, err.Error()
		return head
	}
	bad := func(r reply) *Op {
		head.Outcome, head.Err = Unknown, "unexpected reply "+r.String()
		return head
	}
	if r := replies[0]; r.kind != '+' || r.str != "OK" {
		return bad(r)
	}
	queueErr := false
	for _, r := range replies[1 : len(replies)-1] {
		switch {
		case r.isError():
			queueErr = true
		case r.kind != '+' || r.str != "QUEUED":
			return bad(r)
		}
	}
	last := replies[len(replies)-1]
	switch {
	case kind == KDiscard && last.kind == '+' && last.str == "OK":
	case kind == KDiscard:
		return bad(last)
	case last.isError() && strings.HasPrefix(last.str, "EXECABORT"):
		head.Outcome, head.Err = Refused, "-"+last.str
		for _, op := range ops {
			op.Outcome, op.Err = Refused, "-"+last.str
		}
		return head
	case last.isError():
		// TRYAGAIN, LOADING and the like before anything ran.
		head.Outcome, head.Err = Refused, "-"+last.str
		for _, op := range ops {
			op.Outcome, op.Err = Refused, "-"+last.str
		}
		return head
	case queueErr || last.kind != '*' || len(last.arr) != len(ops):
		return bad(last)
	default:
		for i, op := range ops {
			op.Outcome = OK
			w.settle(op, last.arr[i])
		}
	}
	return head
}

// sweepBatch is how many INCRs of distinct tags a sweeper pipelines,
// sweepTries how often it sends a refused one, and sweepersPerNode how
// many sweep on each node (a new tag costs a Raft entry: concurrent
// connections share one).
const (
	sweepBatch      = 50
	sweepTries      = 20
	sweepersPerNode = 2
)

// sweep INCRs each of the many tags once, sweepBatch at a time pipelined
// on slot's node, with the other slots' sweepers, until every one was
// taken or ctx ends: the cluster then holds every tag of the set. id names
// the client in the history.
func (w *workload) sweep(ctx context.Context, id, slot int) {
	var nc nodeConn
	defer nc.drop()
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	var batch []string // the tags to send next
	tries := 0
	for ctx.Err() == nil && (len(batch) > 0 || int(w.swept.Load()) < len(w.tags.many)) {
		p := w.pm.node(slot).running()
		if p == nil {
			pause(50 * time.Millisecond)
			continue
		}
		rc := nc.to(w, p)
		if rc == nil {
			pause(50 * time.Millisecond)
			continue
		}
		if len(batch) == 0 {
			from := int(w.swept.Add(sweepBatch)) - sweepBatch
			if from >= len(w.tags.many) {
				return
			}
			batch, tries = w.tags.many[from:min(from+sweepBatch, len(w.tags.many))], 0
		}
		var ops []*Op
		var cmds [][]string
		for _, tag := range batch {
			ops = append(ops, &Op{Client: id, Slot: slot, Node: p.nodeID, Proc: p.gen, Conn: rc.id, Kind: KIncr, Key: tag})
			cmds = append(cmds, []string{"INCR", tag})
		}
		start := time.Since(w.t0)
		replies, err := rc.pipeline(time.Now().Add(opTimeout), cmds)
		end := time.Since(w.t0)
		for i, op := range ops {
			op.Start, op.End = start, end
			if err != nil {
				op.Outcome, op.Err = Unknown, err.Error()
			} else {
				w.settle(op, replies[i])
			}
			w.hist.addOp(op)
		}
		// The tags refused (a node starting, no leader) are sent again,
		// up to sweepTries times.
		var again []string
		for _, op := range ops {
			if op.Outcome == Refused {
				again = append(again, op.Key)
			}
		}
		if tries++; tries >= sweepTries {
			again = nil
		}
		batch = again
		if err != nil {
			nc.drop()
		}
		if err != nil || len(again) > 0 {
			pause(100 * time.Millisecond)
		}
	}
}
