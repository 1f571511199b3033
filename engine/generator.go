package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by the generator. The resp package turns them into wire
// errors (CLOCKBACK, ERR ...).
var (
	// ErrClockBack: the wall clock is further behind the logical clock than
	// the allowed borrow. Returned as a *ClockBackError, which says how far.
	ErrClockBack = errors.New("clock is behind issued IDs")
	// ErrInvalidID: Decode was given something that is not an ID.
	ErrInvalidID = errors.New("invalid id")
	// ErrTimeExhausted: the layout's time bits cannot hold the current time.
	ErrTimeExhausted = errors.New("the layout's time bits are used up")
	// ErrHighWater: the high-water mark could not be stored, so no ID whose
	// time lies beyond the stored mark may leave the node.
	ErrHighWater = errors.New("cannot store the high-water mark")
	// ErrClosed: the generator has been closed.
	ErrClosed = errors.New("generator is closed")
	// ErrNoLease: the node holds no lease on its worker ID that covers the
	// next ID's time, so it may not let that ID out. Returned as a
	// *LeaseError, which says since when and why (TRYAGAIN on the wire).
	ErrNoLease = errors.New("no worker lease")
)

// ClockBackError is ErrClockBack with the distance, in milliseconds,
// between the wall clock and the time the next ID would carry (the start
// of its time unit), and what the node is doing about it ("" when nothing
// is known: see Generator.SetClockBackProblem).
type ClockBackError struct {
	BehindMS int64
	Reason   string
}

func (e *ClockBackError) Error() string {
	msg := fmt.Sprintf("clock is %d ms behind issued IDs", e.BehindMS)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is makes errors.Is(err, ErrClockBack) true.
func (e *ClockBackError) Is(target error) bool { return target == ErrClockBack }

// LeaseError is ErrNoLease with the lease end (ms since the epoch, 0 when
// there never was a lease), how far the next ID's time lies at or past it,
// and why the lease is not being renewed ("" when unknown).
type LeaseError struct {
	EndMS    int64
	BehindMS int64
	Reason   string
}

func (e *LeaseError) Error() string {
	switch {
	case e.EndMS == 0:
		msg := "no worker lease yet"
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
		return msg
	case e.Reason == "":
		// Renewals work, and they run a quarter of a lease ahead: the
		// clock moved past the lease faster than they did.
		return fmt.Sprintf("the clock moved %d ms past the worker lease (stepped forward?): renewing the lease", e.BehindMS)
	}
	return fmt.Sprintf("worker lease ended %d ms ago: %s", e.BehindMS, e.Reason)
}

// Is makes errors.Is(err, ErrNoLease) true.
func (e *LeaseError) Is(target error) bool { return target == ErrNoLease }

// Clock reads the wall clock. Production passes time.Now (or DEBUG
// CLOCK's offset over it), with Config.Monotonic; tests a fake.
type Clock func() time.Time

// MonotonicClock returns the machine's monotonic clock as Config.Monotonic
// wants it: the time since the call, as time.Since reads it (one vDSO read,
// where time.Now makes two).
func MonotonicClock() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// HighWaterStore keeps the snowflake high-water mark: every ID the node has
// ever let out has a time below it (the whole of its time unit), and so has
// every UUIDv7 the generator's UUIDv7s let out. The mark is in milliseconds
// whatever the layout's unit. Beside it the store keeps the wall clock the
// mark was written at, so that a start tells a clock that went back from a
// mark that is ahead by the node's own reservation and borrowing.
type HighWaterStore interface {
	// HighWater returns the stored mark in milliseconds since the epoch,
	// 0 when none was ever stored.
	HighWater() (int64, error)
	// HighWaterWall returns the wall clock (ms since the epoch) the stored
	// mark was written at, with ok false when it is not known (no mark,
	// or one written without it).
	HighWaterWall() (wallMS int64, ok bool, err error)
	// SetHighWaterWallSync stores the mark and the wall clock it is
	// written at and returns only once both are durable (one fsync).
	SetHighWaterWallSync(ms, wallMS int64) error
}

// Config sets up a Generator.
type Config struct {
	Layout    Layout
	Worker    int64
	Window    time.Duration // how far ahead the high-water is reserved; default 3s
	MaxBorrow time.Duration // how far logical time may run ahead of the wall clock; default 1s
	// StartAboveMS: start the logical clock above this (ms since the epoch):
	// the end of the previous holder's last lease on the worker ID. It may
	// lie ahead of the wall clock (by up to a lease); starting there is not
	// counted as borrowing.
	StartAboveMS int64
	// LeaseEndMS: the end of the lease on the worker ID at start, in ms
	// since the epoch: only IDs whose time is below it may be issued. 0
	// means no lease yet: nothing is issued until SetLease.
	LeaseEndMS int64
	// Sleep waits when demand outruns the layout (time.Sleep when nil).
	// Tests pass one that moves their fake clock.
	Sleep func(time.Duration)
	// Rand is where UUIDv7s draws its random bits (crypto/rand.Reader when
	// nil).
	Rand io.Reader
	// Monotonic, when set, is the machine's monotonic clock
	// (MonotonicClock), and the clock passed to New is the machine's wall
	// clock (or an offset of it): then the generator reads the wall clock
	// at most once a millisecond, when the monotonic clock says the
	// millisecond of its last reading has passed, and takes that
	// millisecond from the reading in between. A step of the wall clock,
	// back or forward, is seen at most a millisecond late
	// (docs/guarantees.md, "The clock"). nil: the wall clock is read on
	// every call, as tests that step a fake clock need.
	Monotonic func() time.Duration
}

// Generator issues snowflake and gene IDs for one worker. It is safe for
// concurrent use.
//
// IDs are allocated in "slots": slot = time<<SeqBits | sequence<<GeneBits | gene,
// i.e. an ID without its worker bits. A slot's carry out of the sequence
// goes into time, so "the next free slot of gene g above s" is plain
// arithmetic, and moving to the next tick on exhaustion is free.
//
// Inside, time is counted in ticks of the layout's unit (a millisecond by
// default): the logical clock, the floor, the high-water and the window,
// margin and borrow. Milliseconds come in and go out only at the edges:
// the wall clock, the stored high-water, the lease end, StartAboveMS,
// Status and the errors.
type Generator struct {
	layout      Layout
	now         Clock
	mono        func() time.Duration        // Config.Monotonic; nil: read now on every call
	wall        atomic.Pointer[wallReading] // with mono: the last reading of now
	sleep       func(time.Duration)
	precise     bool        // the machine's clocks and no Sleep given: waits are precise (wait)
	waiting     atomic.Bool // a precise wait is in progress
	store       HighWaterStore
	epochMS     int64
	unitMS      int64 // one tick in ms
	windowTicks int64 // --window in ticks
	marginTicks int64 // least reserve above the latest issued time, ticks
	borrowTicks int64 // --max-borrow in whole ticks, rounded down
	seqBits     uint
	timeShift   uint
	geneMask    int64
	geneStep    int64
	fieldMask   int64
	worker      int64 // worker << SeqBits
	maxTime     int64

	reserved  atomic.Int64           // durable high-water, ticks: every issued tick is below it
	leaseEnd  atomic.Int64           // ms since the epoch: every issued tick ends at or before it; only goes up
	leaseWhy  atomic.Pointer[string] // why it is not being renewed; nil when it is
	clockWhy  atomic.Pointer[string] // what the node does about a clock that went back
	reserveMu sync.Mutex             // serialises store writes so they only go up
	seenMS    atomic.Int64           // the latest wall clock read, ms since the epoch, stored beside the mark; only goes up (but in SwitchWorker)
	syncWaits atomic.Uint64          // issues that synced the high-water themselves: the background step fell behind
	trouble   chan struct{}          // kicked on CLOCKBACK and on a lease that ended (Trouble)
	kick      chan struct{}

	uuids *UUIDv7 // UUIDv7s; its times are below the high-water too (g.mu)

	mu        sync.Mutex
	closed    bool
	bootFloor int64   // the borrow's reference at the start: the start tick, less what lies beyond a window (or a lease end) ahead of the clock
	bootStart int64   // logical tick the node started at, less any clock fault: a logical clock above the wall clock and this one means the clock went back
	cur       int64   // logical clock: the latest wall tick seen, or the start
	floor     int64   // every new slot is above this
	maxIssued int64   // largest slot issued
	lastNext  int64   // last NEXTID slot: NEXTIDs strictly increase
	lanes     []int64 // per gene: last slot issued with that gene
	cursor    int64   // gene NEXTID looks from for its next slot
	uuidMS    int64   // time of the last UUIDv7 issued, ms since the epoch; -1: none
	switches  uint64  // worker switches so far (SwitchWorker)
	fast      fastPath
}

// fastPath is what an ID needs to be checked against (g.mu), taken with
// one wall clock reading and recomputed with the next (newReading), when
// the state it was computed from moves down (SwitchWorker) and, for the
// lease and the window, which only move up outside g.mu, when a slot
// reaches it (issueGen). A slot whose tick is below below passes every
// check issueGen makes of it: the lease, the borrow (the clock went back,
// or demand outran the layout), the time bits and the window, with
// headroom enough that the background step needs no kick. Each call then
// compares one number instead of five.
type fastPath struct {
	// until: the reading is the clock's millisecond while the monotonic
	// clock is below it (wallReading.until); math.MinInt64 without
	// Config.Monotonic, once closed, and after SwitchWorker, so that
	// every call reads the clock again.
	until        time.Duration
	wall, wallMS int64 // the reading: its tick, and its ms since the epoch
	below        int64 // the first tick that takes issueGen's checks
}

// New loads the stored high-water, starts the logical clock at
// max(wall, high-water+1ms), and reserves the first window before it
// returns, so the generator can issue at once.
func New(cfg Config, now Clock, store HighWaterStore) (*Generator, error) {
	l := cfg.Layout
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if cfg.Worker < 0 || cfg.Worker > l.MaxWorker() {
		return nil, fmt.Errorf("worker id %d does not fit in %d worker bits (0..%d)", cfg.Worker, l.WorkerBits, l.MaxWorker())
	}
	if cfg.Window <= 0 {
		cfg.Window = 3 * time.Second
	}
	if cfg.MaxBorrow < 0 {
		return nil, errors.New("max-borrow must not be negative")
	}
	if err := l.CheckAt(now()); err != nil {
		return nil, err
	}
	unit := l.UnitMS()
	g := &Generator{
		layout:      l,
		now:         now,
		mono:        cfg.Monotonic,
		sleep:       cfg.Sleep,
		store:       store,
		epochMS:     l.Epoch.UnixMilli(),
		unitMS:      unit,
		windowTicks: max(cfg.Window.Milliseconds()/unit, 2),
		marginTicks: max(cfg.Window.Milliseconds()/32/unit, 2),
		borrowTicks: cfg.MaxBorrow.Milliseconds() / unit,
		seqBits:     uint(l.SeqBits),
		timeShift:   uint(l.WorkerBits + l.SeqBits),
		geneMask:    1<<l.GeneBits - 1,
		geneStep:    1 << l.GeneBits,
		fieldMask:   1<<l.SeqBits - 1,
		worker:      cfg.Worker << l.SeqBits,
		maxTime:     1 << l.TimeBits,
		kick:        make(chan struct{}, 1),
		trouble:     make(chan struct{}, 1),
		lanes:       make([]int64, 1<<l.GeneBits),
		fast:        fastPath{until: math.MinInt64},
	}
	if g.sleep == nil {
		g.sleep = time.Sleep
		g.precise = g.mono != nil
	}
	hwMS, err := store.HighWater()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHighWater, err)
	}
	wroteMS, walled, err := store.HighWaterWall()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHighWater, err)
	}
	hw := ceilDiv(hwMS, unit) // every issued tick ended at or before hwMS
	g.reserved.Store(hw)
	g.leaseEnd.Store(cfg.LeaseEndMS)
	// Every UUIDv7 let out before had a time below hwMS: the next ones
	// start at it.
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	g.uuids, g.uuidMS = NewUUIDv7(now, cfg.Rand), -1
	g.uuids.startAbove(g.epochMS + hwMS)
	wall, nowMS := g.wallMS()
	// The previous holder's ticks all end at or before its lease end.
	above := cfg.StartAboveMS / unit
	start := max(wall, hw+1, above+1)
	// The stored mark runs up to a window ahead of the clock by design;
	// starting above it is not counted as borrowing. Beyond a window the
	// mark holds the previous run's borrowing and its margin, and the
	// borrow counts it: the logical clock stays within a window and the
	// borrow of the clock across any number of restarts. The previous
	// holder's lease end is ahead by design too (by up to a lease, from
	// another node's clock), so starting above it never counts.
	g.bootFloor = max(min(max(wall, hw+1), wall+g.windowTicks), above+1)
	// How far the clock went back is how far it is now below the clock the
	// mark was written at; a lead beyond the window is no clock fault by
	// itself. A mark stored without its clock (by an older build) counts
	// the lead beyond one window as the clock going back.
	back, seen := max(hw+1-(wall+g.windowTicks), 0), nowMS
	if walled {
		back, seen = max(g.ticks(wroteMS)-wall, 0), max(nowMS, wroteMS)
	}
	g.bootStart = max(g.bootFloor, start-back)
	g.seenMS.Store(seen)
	g.cur = start
	g.floor = start<<g.seqBits - 1
	g.maxIssued, g.lastNext = g.floor, g.floor
	for i := range g.lanes {
		g.lanes[i] = g.floor
	}
	if start >= g.maxTime {
		return nil, ErrTimeExhausted
	}
	if err := g.reserve(g.horizon(start, wall), nowMS); err != nil {
		return nil, err
	}
	return g, nil
}

// horizon is the high-water to reserve when t is the latest time issued (or
// about to be) and wall the clock: a window past the clock, and at least a
// margin past t. It is anchored on the wall clock, not on t, so that a
// logical clock running ahead (after a restart, or borrowing) does not push
// the mark further ahead with each restart of a crash loop.
func (g *Generator) horizon(t, wall int64) int64 {
	return max(wall+g.windowTicks, t+g.marginTicks)
}

// lowHeadroom reports whether the mark r should be extended: less than half
// a window past the clock, or less than half a margin past t.
func (g *Generator) lowHeadroom(r, t, wall int64) bool {
	return r-wall < g.windowTicks/2 || r-t < g.marginTicks/2
}

// SetLease raises the lease end to endMS (ms since the epoch: a tick is
// issued only if it ends at or before it); a lower value is ignored. It never takes the generator's lock: an issue in progress sees
// the new end on its next call (or after its next wait).
func (g *Generator) SetLease(endMS int64) {
	for {
		cur := g.leaseEnd.Load()
		if endMS <= cur || g.leaseEnd.CompareAndSwap(cur, endMS) {
			return
		}
	}
}

// SetLeaseProblem records why the lease is not being renewed ("" once
// renewals work again); the text goes into the LeaseError a request gets
// when the lease has ended.
func (g *Generator) SetLeaseProblem(reason string) {
	if reason == "" {
		g.leaseWhy.Store(nil)
		return
	}
	g.leaseWhy.Store(&reason)
}

// SetClockBackProblem records what the node does about a clock that went
// back further than the borrow ("" for nothing to say); the text goes into
// the ClockBackError a request gets.
func (g *Generator) SetClockBackProblem(reason string) {
	if reason == "" {
		g.clockWhy.Store(nil)
		return
	}
	g.clockWhy.Store(&reason)
}

func (g *Generator) clockBackError(behindMS int64) *ClockBackError {
	e := &ClockBackError{BehindMS: behindMS}
	if why := g.clockWhy.Load(); why != nil {
		e.Reason = *why
	}
	return e
}

// Trouble is kicked (it never blocks the generator) when a request is
// refused with CLOCKBACK or for a lease that ended, so that the node acts
// at once: takes a fresh worker ID, or renews the lease.
func (g *Generator) Trouble() <-chan struct{} { return g.trouble }

func (g *Generator) troubled() {
	select {
	case g.trouble <- struct{}{}:
	default:
	}
}

func (g *Generator) leaseError(endMS, t int64) *LeaseError {
	e := &LeaseError{EndMS: endMS, BehindMS: max(t*g.unitMS-endMS, 0)}
	if why := g.leaseWhy.Load(); why != nil {
		e.Reason = *why
	}
	return e
}

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// wallReading is a reading of the wall clock (Generator.wall): the
// millisecond it read and the same to the nanosecond, since the epoch; the
// monotonic clock just before it; and the monotonic clock's reading at or
// before which that millisecond ends.
type wallReading struct {
	ms, ns      int64
	mono, until time.Duration
}

// wallMS reads the clock: the tick it is in and the ms since the epoch.
// With a monotonic clock, it reads the wall clock only once the monotonic
// clock has passed the end of the last reading's millisecond.
func (g *Generator) wallMS() (tick, ms int64) {
	if g.mono == nil {
		ms = g.now().UnixMilli() - g.epochMS
		return g.ticks(ms), ms
	}
	r, _ := g.reading()
	return g.ticks(r.ms), r.ms
}

// reading is the wall clock's reading in force (with a monotonic clock),
// read again if its millisecond is over, and the monotonic clock now.
func (g *Generator) reading() (*wallReading, time.Duration) {
	m := g.mono()
	return g.readingAt(m), m
}

// readingAt is the wall clock's reading in force at m, a reading of the
// monotonic clock taken before the call: the last one, or a new one if m
// is past its millisecond.
func (g *Generator) readingAt(m time.Duration) *wallReading {
	r := g.wall.Load()
	if r == nil || m >= r.until {
		// The monotonic clock is read before the wall clock, so that until
		// falls at or before the true end of the millisecond, however
		// long this goroutine is held up between the two reads.
		at := g.now()
		ns := at.UnixNano() - g.epochMS*int64(time.Millisecond)
		r = &wallReading{ms: floorDiv(ns, int64(time.Millisecond)), ns: ns, mono: m}
		r.until = m + time.Duration((r.ms+1)*int64(time.Millisecond)-ns)
		g.wall.Store(r)
	}
	return r
}

// ticks is the tick the millisecond ms (since the epoch) lies in. In
// milliseconds, the default, it is ms itself: a 64-bit division costs
// about as much as the rest of an ID.
func (g *Generator) ticks(ms int64) int64 {
	if g.unitMS == 1 {
		return ms
	}
	return floorDiv(ms, g.unitMS)
}

// floorDiv and ceilDiv divide rounding down and up (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// leaseTicks is the first tick a lease ending at endMS does not cover.
func (g *Generator) leaseTicks(endMS int64) int64 { return g.ticks(endMS) }

// sinceEpoch is the wall clock since the layout's epoch, to the nanosecond.
// With a monotonic clock it is the reading in force carried on by the
// monotonic clock, so that it agrees with wallMS: a wait computed from it
// never outlasts the millisecond wallMS reports, and a step back that
// wallMS has not seen yet cannot turn into a wait as long as the step.
func (g *Generator) sinceEpoch() time.Duration {
	if g.mono == nil {
		return time.Duration(g.now().UnixNano() - g.epochMS*int64(time.Millisecond))
	}
	r, m := g.reading()
	return time.Duration(r.ns) + m - r.mono
}

// NextID issues one ID, choosing the gene itself in turn. Within a reading
// of the clock it takes the next slot under the lock and compares its tick
// with one precomputed limit (fastPath); anything else, and the first call
// after the reading's millisecond, goes through issueGen.
func (g *Generator) NextID() (int64, error) {
	m := g.monoNow()
	g.mu.Lock()
	if m < g.fast.until {
		if slot, gn := g.nextSlot(-1); slot>>g.seqBits < g.fast.below {
			g.take(slot, gn, -1)
			id := g.slotID(slot)
			g.mu.Unlock()
			return id, nil
		}
	}
	g.mu.Unlock()
	var buf [1]int64
	ids, _, err := g.issueGen(buf[:0], 1, -1)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// NextIDs appends n strictly increasing IDs to dst. Genes go round in turn,
// continuing where the previous call stopped.
func (g *Generator) NextIDs(dst []int64, n int) ([]int64, error) {
	return g.issue(dst, n, -1)
}

// GeneIDs appends n strictly increasing IDs that all carry gene to dst.
func (g *Generator) GeneIDs(dst []int64, gene uint32, n int) ([]int64, error) {
	return g.issue(dst, n, int64(gene)&g.geneMask)
}

// issue hands out n slots of one gene, or of genes in turn when gene < 0.
// On an error midway, the slots already taken are dropped: a gap, never a
// repeat.
//
// When the next slot lies more than the borrow ahead of the clock, either
// the clock went back (CLOCKBACK, at once) or demand outran the layout: then
// it waits for the clock, as long as that takes, with the lock released. It
// never waits for a lease: a slot at or past the lease end is ErrNoLease.
func (g *Generator) issue(dst []int64, n int, gene int64) ([]int64, error) {
	dst, _, err := g.issueGen(dst, n, gene)
	return dst, err
}

// monoNow is the monotonic clock (Config.Monotonic), 0 without one.
func (g *Generator) monoNow() time.Duration {
	if g.mono == nil {
		return 0
	}
	return g.mono()
}

// refresh takes a new reading of the clock if the one in force has run
// out by now. g.mu is held.
func (g *Generator) refresh() {
	if m := g.monoNow(); m >= g.fast.until {
		g.newReading(m)
	}
}

// newReading makes the clock's reading at m (the monotonic clock; without
// one, a reading of the wall clock) the one in force, moves the logical
// clock to it and recomputes the fast path's limit. g.mu is held.
func (g *Generator) newReading(m time.Duration) {
	f := &g.fast
	if g.mono == nil {
		f.wallMS, f.until = g.now().UnixMilli()-g.epochMS, math.MinInt64
	} else {
		r := g.readingAt(m)
		f.wallMS, f.until = r.ms, r.until
	}
	f.wall = g.ticks(f.wallMS)
	g.saw(f.wallMS)
	g.tick(f.wall)
	g.setBelow()
}

// setBelow recomputes the fast path's limit from the reading in force and
// the state: below it, a tick is before the lease end, at most the borrow
// ahead of the clock and the boot floor, inside the time bits, and at
// least half a margin below the durable high-water (so below it too). It
// kicks the background step when the headroom left to the clock is low,
// which is the part of lowHeadroom no slot below the limit changes. The
// lease and the high-water only go up outside g.mu, so a limit computed
// before they moved is lower than it could be, never higher. g.mu is held.
func (g *Generator) setBelow() {
	r := g.reserved.Load()
	g.fast.below = min(g.leaseTicks(g.leaseEnd.Load()), max(g.fast.wall, g.bootFloor)+g.borrowTicks+1,
		g.maxTime, r-g.marginTicks/2+1)
	if g.closed {
		g.fast.below = math.MinInt64
	}
	if g.lowHeadroom(r, g.maxIssued>>g.seqBits, g.fast.wall) {
		g.kickStep()
	}
}

// kickStep asks the background step (Run) to extend the high-water now.
func (g *Generator) kickStep() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// nextSlot is the slot the next ID of gene takes (gene < 0: NEXTID's), and
// that slot's gene. g.mu is held.
//
// NEXTID's is the first slot above its last one, from the gene whose turn
// it is on, that no GENEID has taken: a slot x is free when it lies above
// its gene's lane (x > lanes[x's gene]). Stepping over the taken slots one
// by one, rather than over the rest of a row of genes, keeps NEXTIDs and
// GENEIDs of random genes mixed from wasting most of the millisecond. The
// step is bounded: past a row of taken slots NEXTID takes its gene's next
// slot above that gene's lane, as GENEID does.
func (g *Generator) nextSlot(gene int64) (slot, gn int64) {
	if gene >= 0 {
		return g.slotAbove(max(g.floor, g.lanes[gene]), gene), gene
	}
	lo := max(g.floor, g.lastNext)
	slot = g.slotAbove(lo, g.cursor)
	for range g.geneStep {
		if slot > g.lanes[slot&g.geneMask] {
			return slot, slot & g.geneMask
		}
		slot++
	}
	gn = slot & g.geneMask
	return g.slotAbove(max(lo, g.lanes[gn]), gn), gn
}

// slotAbove is the first slot of gene above lo.
func (g *Generator) slotAbove(lo, gene int64) int64 {
	slot := lo&^g.geneMask | gene
	if slot <= lo {
		slot += g.geneStep
	}
	return slot
}

// take records slot, of gene gn, as issued (gene < 0: as a NEXTID).
// g.mu is held.
func (g *Generator) take(slot, gn, gene int64) {
	g.lanes[gn] = slot
	if gene < 0 {
		g.lastNext = slot
		g.cursor = (gn + 1) & g.geneMask
	}
	g.maxIssued = max(g.maxIssued, slot)
}

// issueGen is issue, also returning the count of worker switches the IDs
// were issued under (NextIDRuns extends a run only under the same one).
func (g *Generator) issueGen(dst []int64, n int, gene int64) (_ []int64, switches uint64, _ error) {
	m := g.monoNow()
	g.mu.Lock()
	defer g.mu.Unlock()
	if m >= g.fast.until {
		g.newReading(m)
	}
	if g.closed {
		return dst, 0, ErrClosed
	}
	switches = g.switches
	start := len(dst)
	fresh := false // the reading in force was checked under the lock
	checked := false
	for i := 0; i < n; {
		slot, gn := g.nextSlot(gene)
		if t := slot >> g.seqBits; t >= g.fast.below {
			// The lease or the window may have moved up since the limit
			// was computed.
			g.setBelow()
			if t >= g.fast.below {
				checked = true
				wall := g.fast.wall
				leaseMS := g.leaseEnd.Load()
				if t >= g.leaseTicks(leaseMS) {
					g.troubled()
					return dst[:start], switches, g.leaseError(leaseMS, t)
				}
				if t-max(wall, g.bootFloor) > g.borrowTicks {
					if !fresh {
						// The reading may be older than the millisecond
						// another caller already moved the logical clock
						// to: read the clock again before telling a clock
						// that went back from a stale reading.
						fresh = true
						g.refresh()
						continue
					}
					if g.cur > max(wall, g.bootStart) {
						// The logical clock is ahead of both the clock and
						// where the start explains it: the wall clock went
						// back.
						g.troubled()
						return dst[:start], switches, g.clockBackError(t*g.unitMS - g.fast.wallMS)
					}
					// Demand outran 2^seq-bits IDs per tick: wait for the clock,
					// until the moment it reaches tick t less the borrow and no
					// longer (whole ticks from a reading inside one wait up to a
					// tick too long; this is to the nanosecond).
					g.mu.Unlock()
					if d := time.Duration((t-g.borrowTicks)*g.unitMS)*time.Millisecond - g.sinceEpoch(); d > 0 {
						g.wait(d)
					}
					g.mu.Lock()
					if g.closed {
						return dst[:start], switches, ErrClosed
					}
					g.refresh()
					fresh = true
					if g.switches != switches {
						// A fresh worker ID while this waited: start over on it
						// (the IDs taken so far are dropped, a gap), so that one
						// reply's IDs still increase.
						dst, i, switches = dst[:start], 0, g.switches
					}
					continue
				}
				if t >= g.maxTime {
					return dst[:start], switches, ErrTimeExhausted
				}
				if t >= g.reserved.Load() {
					// The background step fell behind: reserve now, on the
					// hot path, with g.mu released so that other callers
					// and Status do not wait for the sync. Nothing at or
					// above the mark is issued meanwhile (every caller
					// checks it under g.mu, and it only goes up once
					// durable); the slot is taken again once it holds.
					g.syncWaits.Add(1)
					wallMS := g.fast.wallMS
					g.mu.Unlock()
					err := g.reserve(g.horizon(t, wall), wallMS)
					g.mu.Lock()
					if err != nil {
						return dst[:start], switches, err
					}
					if g.closed {
						return dst[:start], switches, ErrClosed
					}
					if g.switches != switches {
						// A fresh worker ID while this synced: start over on
						// it, as after a wait for the clock.
						dst, i, switches = dst[:start], 0, g.switches
					}
					continue
				}
			}
		}
		g.take(slot, gn, gene)
		dst = append(dst, g.slotID(slot))
		i++
	}
	if checked && g.lowHeadroom(g.reserved.Load(), g.maxIssued>>g.seqBits, g.fast.wall) {
		g.kickStep()
	}
	return dst, switches, nil
}

// spinWait is how much of a precise wait is spun through rather than slept.
const spinWait = 200 * time.Microsecond

// wait waits d for the clock, with g.mu released: g.sleep, except on the
// machine's clocks (precise), where the one caller waiting at a time
// sleeps in the kernel for all but the last spinWait of it and spins
// through that on the monotonic clock, yielding to other goroutines; the
// others sleep with time.Sleep meanwhile, so that a saturated node with
// many clients spins on one goroutine at most. time.Sleep alone would not
// do: Go's timers wake through the netpoller, whose epoll_wait counts
// whole milliseconds, so a wait below a millisecond lasts a millisecond or
// more, and part of the next tick's 2^seq-bits IDs is lost with every tick
// that runs out (bench/RESULTS.md, "The engine"). nanosleep oversleeps by
// tens of microseconds, which the spin takes up.
func (g *Generator) wait(d time.Duration) {
	if !g.precise || !g.waiting.CompareAndSwap(false, true) {
		g.sleep(d)
		return
	}
	defer g.waiting.Store(false)
	end := g.mono() + d
	if s := d - spinWait; s > 0 {
		kernelSleep(s)
	}
	for g.mono() < end {
		runtime.Gosched()
	}
}

// UUIDv7s appends n RFC 9562 UUIDv7s to dst, each greater than every one
// this node issued before, across restarts as its IDs are: the UUIDs' times
// lie below the durable high-water as the IDs' do (reserved here when a
// UUID would reach it), and a new generator starts them at the stored mark.
// A clock that went back does not stop them (UUIDv7 keeps the last
// millisecond).
func (g *Generator) UUIDv7s(dst [][16]byte, n int) ([][16]byte, error) {
	wall, wallMS := g.wallMS()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return dst, ErrClosed
	}
	start := len(dst)
	dst, lastUnixMS, err := g.uuids.next(dst, n)
	if err != nil {
		return dst[:start], err
	}
	last := lastUnixMS - g.epochMS
	if t := floorDiv(last, g.unitMS); t >= g.reserved.Load() {
		g.syncWaits.Add(1)
		if err := g.reserve(g.horizon(t, wall), wallMS); err != nil {
			return dst[:start], err
		}
	}
	g.uuidMS = last
	return dst, nil
}

// tick moves the logical clock to wall when wall is ahead of it. From a new
// logical millisecond on, everything is above everything issued before.
func (g *Generator) tick(wall int64) {
	if wall > g.cur {
		g.cur = wall
		g.floor = max(wall<<g.seqBits-1, g.maxIssued)
	}
}

// saw records a reading of the wall clock (ms since the epoch) and returns
// the latest one seen.
func (g *Generator) saw(ms int64) int64 {
	for {
		cur := g.seenMS.Load()
		if ms <= cur || g.seenMS.CompareAndSwap(cur, ms) {
			return max(ms, cur)
		}
	}
}

// reserve makes tick t the durable high-water if it is above the current
// one (stored as t's first millisecond), beside the latest wall clock read
// (wallMS, or a later one). Writes are serialised so the stored mark never
// goes down.
func (g *Generator) reserve(t, wallMS int64) error {
	g.reserveMu.Lock()
	defer g.reserveMu.Unlock()
	if t <= g.reserved.Load() {
		return nil
	}
	if err := g.store.SetHighWaterWallSync(t*g.unitMS, g.saw(wallMS)); err != nil {
		return fmt.Errorf("%w: %v", ErrHighWater, err)
	}
	g.reserved.Store(t)
	return nil
}

// ReserveAhead extends the high-water when its headroom runs low (see
// horizon). Run calls it; tests may too.
func (g *Generator) ReserveAhead() error {
	wall, wallMS := g.wallMS()
	g.mu.Lock()
	t := max(g.cur, g.maxIssued>>g.seqBits)
	closed, switches := g.closed, g.switches
	g.mu.Unlock()
	if closed || !g.lowHeadroom(g.reserved.Load(), t, wall) {
		return nil
	}
	g.reserveMu.Lock()
	moved := g.switches != switches // t was the previous worker's
	g.reserveMu.Unlock()
	if moved {
		return nil
	}
	return g.reserve(g.horizon(t, wall), wallMS)
}

// SwitchWorker moves the generator to a fresh worker ID, on which it
// issues above startAboveMS (the end of the worker's previous lease) from
// the wall clock on, within the lease leaseEndMS. It is how a node whose
// clock went back further than the borrow goes on issuing
// (docs/guarantees.md, promise 3): the old worker's IDs lie below its lease end, which its holder no
// longer extends and the cluster does not hand out again below. The
// logical clock restarts at the wall clock, so later IDs may be smaller
// than earlier ones: per-node order restarts with the new worker.
//
// The stored high-water is lowered to the new worker's window: the caller
// must have stored the new worker ID durably first, so that a restart
// never pairs the old worker with the lowered mark.
func (g *Generator) SwitchWorker(worker, startAboveMS, leaseEndMS int64) error {
	if worker < 0 || worker > g.layout.MaxWorker() {
		return fmt.Errorf("worker id %d does not fit in %d worker bits (0..%d)", worker, g.layout.WorkerBits, g.layout.MaxWorker())
	}
	wall, wallMS := g.wallMS()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	// The previous holder's ticks all end at or before its lease end.
	start := max(wall, startAboveMS/g.unitMS+1)
	if start >= g.maxTime {
		return ErrTimeExhausted
	}
	g.reserveMu.Lock()
	defer g.reserveMu.Unlock()
	hw := g.horizon(start, wall)
	// The clock the old worker's IDs went past is no longer a reference:
	// the new worker starts at the wall clock.
	if err := g.store.SetHighWaterWallSync(hw*g.unitMS, wallMS); err != nil {
		return fmt.Errorf("%w: %v", ErrHighWater, err)
	}
	g.reserved.Store(hw)
	g.seenMS.Store(wallMS)
	g.switches++
	g.fast.until = math.MinInt64 // the limit was the old worker's
	g.worker = worker << g.seqBits
	g.leaseEnd.Store(leaseEndMS)
	g.clockWhy.Store(nil)
	g.bootFloor, g.bootStart, g.cur = start, start, start
	g.floor = start<<g.seqBits - 1
	g.maxIssued, g.lastNext = g.floor, g.floor
	for i := range g.lanes {
		g.lanes[i] = g.floor
	}
	return nil
}

// Run keeps the high-water reserved ahead until ctx is done. Errors go to
// onError (a failed step is retried on the next tick, and the hot path
// reserves for itself if the window runs out).
func (g *Generator) Run(ctx context.Context, onError func(error)) {
	tick := time.NewTicker(time.Duration(max(g.windowTicks*g.unitMS/8, 5)) * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-g.kick:
		}
		if err := g.ReserveAhead(); err != nil && onError != nil {
			onError(err)
		}
	}
}

// Close stops issuing and lowers the stored high-water to just above the
// last issued ID, so that a clean restart does not start a window ahead.
func (g *Generator) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	g.fast.until, g.fast.below = math.MinInt64, math.MinInt64
	g.reserveMu.Lock()
	defer g.reserveMu.Unlock()
	exact := g.maxIssued>>g.seqBits + 1
	if g.uuidMS >= 0 {
		exact = max(exact, floorDiv(g.uuidMS, g.unitMS)+1)
	}
	if exact >= g.reserved.Load() {
		return nil
	}
	if err := g.store.SetHighWaterWallSync(exact*g.unitMS, g.seenMS.Load()); err != nil {
		return fmt.Errorf("%w: %v", ErrHighWater, err)
	}
	g.reserved.Store(exact)
	return nil
}

// Status is a snapshot for INFO and metrics, in milliseconds (a time in
// ticks as the first millisecond of its tick).
type Status struct {
	Worker        int64
	LogicalMS     int64 // logical clock, ms since the epoch
	LastTimeMS    int64 // time of the largest ID issued, ms since the epoch
	HighWaterMS   int64 // durable high-water, ms since the epoch
	BorrowMS      int64 // how far issued IDs run ahead of the wall clock (0 if not)
	WindowAheadMS int64 // high-water minus wall clock
	LeaseEndMS    int64 // end of the worker lease, ms since the epoch (0: none yet)
	// ClockBehindMS is how far the next ID's time is ahead of the wall
	// clock once the clock went back (0 when it did not), less what the
	// start explains (a window's reserve, a reused worker's previous
	// lease). Past the borrow the node answers CLOCKBACK, or takes a fresh
	// worker ID (SwitchWorker).
	ClockBehindMS int64
	// Counter is what each ID reads to tell whether the wall clock's
	// reading still holds: "monotonic", or "wall" without Monotonic.
	Counter string
	// WindowSyncWaits counts the calls that found the durable high-water
	// reached and synced it themselves, the background step (Run) having
	// fallen behind: each waited for an fsync.
	WindowSyncWaits uint64
}

// Status reports the generator's clocks.
func (g *Generator) Status() Status {
	wall, wallMS := g.wallMS()
	g.mu.Lock()
	defer g.mu.Unlock()
	last := g.maxIssued >> g.seqBits
	hw := g.reserved.Load()
	u := g.unitMS
	// How far the clock went back: once the logical clock is ahead of the
	// clock and of where the start explains it (read under the lock: cur
	// may be a later reading than wall), the next ID's time past them.
	behind := int64(0)
	if now, _ := g.wallMS(); g.cur > max(now, g.bootStart) {
		behind = max(g.cur, last+1) - max(now, g.bootStart)
	}
	return Status{
		Worker:        g.worker >> g.seqBits,
		LogicalMS:     g.cur * u,
		LastTimeMS:    last * u,
		HighWaterMS:   hw * u,
		BorrowMS:      max(0, last-wall) * u,
		WindowAheadMS: hw*u - wallMS,
		LeaseEndMS:    g.leaseEnd.Load(),
		ClockBehindMS: behind * u,
		Counter:       g.counter(),

		WindowSyncWaits: g.syncWaits.Load(),
	}
}

// counter is Status.Counter.
func (g *Generator) counter() string {
	if g.mono != nil {
		return "monotonic"
	}
	return "wall"
}
