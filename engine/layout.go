package engine

import (
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// DefaultEpoch is the default start of ID time: 2025-01-01T00:00:00Z.
var DefaultEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Layout is the bit layout of an ID: [0][time][worker][field], where
// field = (sequence << GeneBits) | gene.
type Layout struct {
	Epoch      time.Time
	TimeBits   int
	WorkerBits int
	SeqBits    int
	GeneBits   int
}

// DefaultLayout is 41 bits of milliseconds, 10 of worker and 12 of field,
// 8 of which hold the gene.
func DefaultLayout() Layout {
	return Layout{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 8}
}

// Validate reports whether the widths make a positive int64 layout.
func (l Layout) Validate() error {
	switch {
	case l.TimeBits+l.WorkerBits+l.SeqBits != 63:
		return fmt.Errorf("layout: time-bits + worker-bits + seq-bits must be 63, got %d+%d+%d=%d",
			l.TimeBits, l.WorkerBits, l.SeqBits, l.TimeBits+l.WorkerBits+l.SeqBits)
	case l.TimeBits < 32:
		return fmt.Errorf("layout: time-bits must be at least 32 (about 50 days), got %d", l.TimeBits)
	case l.WorkerBits < 0 || l.SeqBits < 1:
		return errors.New("layout: worker-bits must be >= 0 and seq-bits >= 1")
	case l.SeqBits > 22:
		return fmt.Errorf("layout: seq-bits must be at most 22, got %d", l.SeqBits)
	case l.GeneBits < 0 || l.GeneBits > l.SeqBits:
		return fmt.Errorf("layout: gene-bits must be between 0 and seq-bits (%d), got %d", l.SeqBits, l.GeneBits)
	case l.Epoch.IsZero():
		return errors.New("layout: epoch must be set")
	}
	return nil
}

// MinTimeLeft is how much ID time a layout must have left when a node
// starts: CheckAt refuses less.
const MinTimeLeft = 365 * 24 * time.Hour

// CheckAt reports whether the layout can issue IDs from now on: its epoch
// must not lie after now (every ID would be ahead of the clock, and the
// node would answer CLOCKBACK), and its time bits must last at least
// MinTimeLeft past now.
func (l Layout) CheckAt(now time.Time) error {
	epoch := l.Epoch.UTC().Format(time.RFC3339Nano)
	if l.Epoch.After(now) {
		return fmt.Errorf("--epoch %s is in the future (now %s)", epoch, now.UTC().Format(time.RFC3339))
	}
	if l.TimeBits < 0 || l.TimeBits >= 62 {
		return nil // 2^62 ms is a hundred million years; beyond it, Validate refuses
	}
	endMS := l.Epoch.UnixMilli() + 1<<l.TimeBits
	if endMS-now.UnixMilli() < MinTimeLeft.Milliseconds() {
		return fmt.Errorf("--epoch %s with --time-bits %d: time bits run out at %s: fewer than a year left",
			epoch, l.TimeBits, time.UnixMilli(endMS).UTC().Format(time.RFC3339))
	}
	return nil
}

// String names the layout; it is what the data directory stores and what a
// refusal to start with a different layout prints.
func (l Layout) String() string {
	return fmt.Sprintf("epoch=%s time-bits=%d worker-bits=%d seq-bits=%d gene-bits=%d",
		l.Epoch.UTC().Format(time.RFC3339Nano), l.TimeBits, l.WorkerBits, l.SeqBits, l.GeneBits)
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
	Time     time.Time // the ID's millisecond, UTC
	UnixMS   int64     // the same as Unix milliseconds
	Worker   int64
	Sequence int64
	Gene     int64
}

// Decode takes an ID apart. IDs are positive; anything else is ErrInvalidID.
func (l Layout) Decode(id int64) (Parts, error) {
	if id <= 0 {
		return Parts{}, ErrInvalidID
	}
	shiftTime := l.WorkerBits + l.SeqBits
	field := id & (1<<l.SeqBits - 1)
	ms := l.Epoch.UnixMilli() + id>>shiftTime
	return Parts{
		Time:     time.UnixMilli(ms).UTC(),
		UnixMS:   ms,
		Worker:   id >> l.SeqBits & l.MaxWorker(),
		Sequence: field >> l.GeneBits,
		Gene:     field & (1<<l.GeneBits - 1),
	}, nil
}
