package engine

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// DefaultEpoch is the default start of ID time: 2025-01-01T00:00:00Z.
var DefaultEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Units are the time units a layout may count in: the millisecond (the
// default), and the 10 ms and the second that sonyflake and Baidu's
// uid-generator chose so that fewer bits last as long.
var Units = []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second}

// Bounds of Layout.IDBits: 63 (a positive int64) by default, 53 for IDs
// that JavaScript reads exactly (Number.MAX_SAFE_INTEGER is 2^53-1).
const (
	MinIDBits     = 40
	MaxIDBits     = 63
	DefaultIDBits = 63
)

// Layout is the bit layout of an ID: [0...][time][worker][field] in IDBits
// bits, where time counts Units since Epoch and field =
// (sequence << GeneBits) | gene.
type Layout struct {
	Epoch time.Time
	// IDBits is how many low bits an ID uses (TimeBits + WorkerBits +
	// SeqBits): every ID is below 2^IDBits. 0 means DefaultIDBits.
	IDBits int
	// Unit is what the time bits count (one of Units). 0 means a
	// millisecond.
	Unit       time.Duration
	TimeBits   int
	WorkerBits int
	SeqBits    int
	GeneBits   int
	// Reserved is the worker IDs no node of the cluster takes, as
	// FormatWorkerRanges writes them ("0-15,100"; "" for none): those of
	// legacy generators that still run beside the cluster.
	Reserved string
}

// DefaultLayout is 63 bits: 41 bits of milliseconds, 10 of worker and 12
// of field, 8 of which hold the gene.
func DefaultLayout() Layout {
	return Layout{Epoch: DefaultEpoch, IDBits: DefaultIDBits, Unit: time.Millisecond, TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 8}
}

// minLifetime is how long the time bits of a split that AutoLayout picks
// last at least: 2^41 ms, 2^38 x 10 ms and 2^31 s all do.
const minLifetime = 68 * 365 * 24 * time.Hour

// AutoLayout is the split picked for idBits bits counting in unit when no
// width is given: DefaultLayout for 63 bits of milliseconds; otherwise the
// fewest time bits that last 68 years (41 of 1 ms, 38 of 10 ms, 31 of 1 s),
// and of the rest a third (at most 10 bits) for the worker and the others
// for the field, with the gene 4 bits below the field (at most 8). For --id-bits 53 in 10 ms: 38/5/10, gene 6: 87 years, 32
// workers, 1024 IDs per 10 ms per node.
func AutoLayout(idBits int, unit time.Duration) (Layout, error) {
	if unit == time.Millisecond && idBits == DefaultIDBits {
		return DefaultLayout(), nil
	}
	l := Layout{Epoch: DefaultEpoch, IDBits: idBits, Unit: unit}
	if unit <= 0 {
		return l, fmt.Errorf("layout: time unit %v must be positive", unit)
	}
	for l.TimeBits = 1; l.TimeBits < 62 && time.Duration(1<<l.TimeBits)*unit < minLifetime; l.TimeBits++ {
	}
	rest := idBits - l.TimeBits
	if rest < 3 {
		return l, fmt.Errorf("layout: --id-bits %d in units of %v leaves %d bits beside the %d time bits that last 68 years: "+
			"use a coarser --time-unit or give --time-bits --worker-bits --seq-bits", idBits, unit, rest, l.TimeBits)
	}
	l.WorkerBits = min(10, rest/3)
	l.SeqBits = rest - l.WorkerBits
	l.GeneBits = max(0, min(8, l.SeqBits-4))
	return l, l.Validate()
}

// autoRest is how many bits AutoUnit wants beside the time bits: 32
// workers of 1024 IDs per unit.
const autoRest = 15

// AutoUnit is the unit picked for idBits bits when --time-unit is not
// given: the millisecond for 63 bits, else the finest unit whose AutoLayout
// leaves 15 bits beside the time bits (53 bits: 10 ms), else the second.
func AutoUnit(idBits int) time.Duration {
	if idBits == DefaultIDBits {
		return time.Millisecond
	}
	for _, u := range Units {
		if l, err := AutoLayout(idBits, u); err == nil && idBits-l.TimeBits >= autoRest {
			return u
		}
	}
	return Units[len(Units)-1]
}

// Bits is IDBits, with 0 read as DefaultIDBits: every ID is below 2^Bits.
func (l Layout) Bits() int { return l.idBits() }

func (l Layout) idBits() int {
	if l.IDBits == 0 {
		return DefaultIDBits
	}
	return l.IDBits
}

// UnitMS is the layout's time unit in milliseconds.
func (l Layout) UnitMS() int64 {
	if l.Unit == 0 {
		return 1
	}
	return l.Unit.Milliseconds()
}

// Validate reports whether the widths make a layout of IDBits bits.
func (l Layout) Validate() error {
	bits, unitOK := l.idBits(), l.Unit == 0
	for _, u := range Units {
		unitOK = unitOK || l.Unit == u
	}
	switch {
	case bits < MinIDBits || bits > MaxIDBits:
		return fmt.Errorf("layout: id-bits must be between %d and %d, got %d", MinIDBits, MaxIDBits, bits)
	case !unitOK:
		return fmt.Errorf("layout: time unit must be 1ms, 10ms or 1s, got %v", l.Unit)
	case l.TimeBits+l.WorkerBits+l.SeqBits != bits:
		return fmt.Errorf("layout: time-bits + worker-bits + seq-bits must be %d (id-bits), got %d+%d+%d=%d",
			bits, l.TimeBits, l.WorkerBits, l.SeqBits, l.TimeBits+l.WorkerBits+l.SeqBits)
	case l.TimeBits < 1 || l.TimeBits > 62 || 1<<l.TimeBits < (1<<32)/l.UnitMS():
		return fmt.Errorf("layout: %d time bits of %v do not last 2^32 ms (about 50 days)", l.TimeBits, l.unitName())
	case (1 << l.TimeBits) > (1<<62)/l.UnitMS():
		return fmt.Errorf("layout: %d time bits of %v overflow int64 milliseconds", l.TimeBits, l.unitName())
	case l.WorkerBits < 0 || l.SeqBits < 1:
		return errors.New("layout: worker-bits must be >= 0 and seq-bits >= 1")
	case l.SeqBits > 22:
		return fmt.Errorf("layout: seq-bits must be at most 22, got %d", l.SeqBits)
	case l.GeneBits < 0 || l.GeneBits > l.SeqBits:
		return fmt.Errorf("layout: gene-bits must be between 0 and seq-bits (%d), got %d", l.SeqBits, l.GeneBits)
	case l.Epoch.IsZero():
		return errors.New("layout: epoch must be set")
	}
	return l.validateReserved()
}

// unitName is the unit as the flag spells it: 1ms, 10ms, 1s.
func (l Layout) unitName() string {
	if l.Unit == 0 {
		return time.Millisecond.String()
	}
	return l.Unit.String()
}

// MinTimeLeft is how much ID time a layout must have left when a node
// starts: CheckAt refuses less.
const MinTimeLeft = 365 * 24 * time.Hour

// WarnTimeLeft is how much ID time left makes a node warn, once a day.
const WarnTimeLeft = 2 * 365 * 24 * time.Hour

// End is when the time bits run out: the first instant no ID can carry.
func (l Layout) End() time.Time {
	return time.UnixMilli(l.Epoch.UnixMilli() + (1<<l.TimeBits)*l.UnitMS()).UTC()
}

// TimeLeft is how much ID time is left at now (negative once it ran out).
func (l Layout) TimeLeft(now time.Time) time.Duration {
	left := l.End().UnixMilli() - now.UnixMilli()
	if left > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(left) * time.Millisecond
}

// CheckAt reports whether the layout can issue IDs from now on: its epoch
// must not lie after now (every ID would be ahead of the clock, and the
// node would answer CLOCKBACK), and its time bits must last at least
// MinTimeLeft past now.
func (l Layout) CheckAt(now time.Time) error {
	epoch := l.Epoch.UTC().Format(time.RFC3339Nano)
	if l.Epoch.After(now) {
		return fmt.Errorf("--epoch %s is in the future (now %s)", epoch, now.UTC().Format(time.RFC3339))
	}
	if l.TimeLeft(now) < MinTimeLeft {
		return fmt.Errorf("--epoch %s with --time-bits %d of %v: time bits run out at %s: fewer than a year left",
			epoch, l.TimeBits, l.unitName(), l.End().Format(time.RFC3339))
	}
	return nil
}

// String names the layout; it is what the data directory stores, what a
// join compares, and what a refusal to start with a different layout
// prints. A 63-bit layout of milliseconds is named as before --id-bits and
// --time-unit existed, so that data directories and clusters made then
// (and members not yet upgraded) still match it; any other layout names
// its id-bits and time-unit too. Reserved worker IDs, when there are any,
// end the name (" reserved-workers=0-15,100").
func (l Layout) String() string {
	epoch := l.Epoch.UTC().Format(time.RFC3339Nano)
	var name string
	if l.idBits() == DefaultIDBits && l.UnitMS() == 1 {
		name = fmt.Sprintf("epoch=%s time-bits=%d worker-bits=%d seq-bits=%d gene-bits=%d",
			epoch, l.TimeBits, l.WorkerBits, l.SeqBits, l.GeneBits)
	} else {
		name = fmt.Sprintf("epoch=%s id-bits=%d time-unit=%s time-bits=%d worker-bits=%d seq-bits=%d gene-bits=%d",
			epoch, l.idBits(), l.unitName(), l.TimeBits, l.WorkerBits, l.SeqBits, l.GeneBits)
	}
	if l.Reserved != "" {
		name += " reserved-workers=" + l.Reserved
	}
	return name
}

// MaxWorker is the largest worker ID the layout can hold.
func (l Layout) MaxWorker() int64 { return 1<<l.WorkerBits - 1 }

// Gene returns gene(buyer): a canonical non-negative decimal integer that
// fits in int64 maps to its value mod 2^GeneBits, anything else to
// crc32_ieee(bytes) mod 2^GeneBits.
func (l Layout) Gene(buyer []byte) uint32 {
	mask := uint64(1)<<l.GeneBits - 1
	if n, ok := canonicalUint(buyer); ok {
		return uint32(n & mask)
	}
	return uint32(uint64(crc32.ChecksumIEEE(buyer)) & mask)
}

// GeneOfString is Gene of a string buyer, without copying it when it is a
// canonical decimal (the common case: a user or order number).
func (l Layout) GeneOfString(buyer string) uint32 {
	mask := uint64(1)<<l.GeneBits - 1
	if n, ok := canonicalUintString(buyer); ok {
		return uint32(n & mask)
	}
	return uint32(uint64(crc32.ChecksumIEEE([]byte(buyer))) & mask)
}

// canonicalUintString is canonicalUint of a string.
func canonicalUintString(b string) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n <= 1<<63-1
}

// canonicalUint parses a decimal with no sign and no leading zeros ("0"
// allowed) that fits in int64.
func canonicalUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n <= 1<<63-1
}

// Parts is an ID taken apart.
type Parts struct {
	Time     time.Time // the start of the ID's time unit, UTC
	UnixMS   int64     // the same as Unix milliseconds
	Worker   int64
	Sequence int64
	Gene     int64
}

// Decode takes an ID apart. IDs are positive and below 2^IDBits; anything
// else is ErrInvalidID.
func (l Layout) Decode(id int64) (Parts, error) {
	if id <= 0 || (l.idBits() < 63 && id >= 1<<l.idBits()) {
		return Parts{}, ErrInvalidID
	}
	shiftTime := l.WorkerBits + l.SeqBits
	field := id & (1<<l.SeqBits - 1)
	ms := l.Epoch.UnixMilli() + id>>shiftTime*l.UnitMS()
	return Parts{
		Time:     time.UnixMilli(ms).UTC(),
		UnixMS:   ms,
		Worker:   id >> l.SeqBits & l.MaxWorker(),
		Sequence: field >> l.GeneBits,
		Gene:     field & (1<<l.GeneBits - 1),
	}, nil
}
