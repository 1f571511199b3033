package engine

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"sync"
	"time"
)

// ErrInvalidUUID: ParseUUIDv7 was given something that is not an RFC 9562
// UUIDv7 in its canonical 36-character form.
var ErrInvalidUUID = errors.New("invalid uuidv7")

// UUIDv7 counter layout (RFC 9562 section 6.2, method 1, "fixed bit-length
// dedicated counter"): after the 48-bit Unix millisecond time and the 4-bit
// version come 12 bits of rand_a and, after the 2-bit variant, 62 bits of
// rand_b. The first 42 of those 74 bits are a counter, the last 32 are
// fresh random bits in every UUID.
const (
	uuidCounterBits = 42
	uuidCounterMax  = 1<<uuidCounterBits - 1
	// uuidSeedMask seeds the counter at each new millisecond with its top
	// bit clear (the RFC's rollover guard), so at least 2^41 increments fit
	// in one millisecond before the counter would roll over.
	uuidSeedMask = 1<<(uuidCounterBits-1) - 1
)

// UUIDv7 issues RFC 9562 version 7 UUIDs whose order follows the order
// they were issued in: every UUID one UUIDv7 returns is greater, as a byte
// string and as its canonical text, than every UUID it returned before.
//
// Within a millisecond the counter increases by one; each new millisecond
// seeds it with 41 random bits. When the wall clock goes back, or the
// counter would roll over, the UUIDs keep the last millisecond (moving it
// one ahead on a rollover), so the order holds and the embedded time is at
// most that far ahead of the wall clock.
//
// Across nodes a UUIDv7 is unique through its random bits: two nodes
// collide only when they issue in the same millisecond, their counter
// ranges overlap (each seeded with 41 random bits) and the 32 fresh random
// bits of the two UUIDs are equal. For two nodes issuing n UUIDs each in
// one millisecond the chance is at most 2n/2^41 * n/2^32 = n^2/2^72; at a
// million UUIDs per millisecond per node, about 2*10^-10 per millisecond
// in which both issue so many.
type UUIDv7 struct {
	now  func() time.Time
	rand io.Reader

	mu      sync.Mutex
	lastMS  int64
	counter uint64
	reseed  bool   // startAbove set lastMS: seed the counter at the next UUID
	buf     []byte // random bytes read ahead
}

// startAbove makes every later UUID greater than every UUID whose time is
// below ms (Unix ms): the next one carries at least ms, with a fresh seed.
func (g *UUIDv7) startAbove(ms int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastMS, g.reseed = ms, true
}

// NewUUIDv7 makes a generator on the clock now, drawing random bits from
// rand (crypto/rand.Reader in production).
func NewUUIDv7(now func() time.Time, rand io.Reader) *UUIDv7 {
	return &UUIDv7{now: now, rand: rand}
}

// Next appends n UUIDs, each greater than the one before, to dst.
func (g *UUIDv7) Next(dst [][16]byte, n int) ([][16]byte, error) {
	dst, _, err := g.next(dst, n)
	return dst, err
}

// next is Next that also returns the time (Unix ms) of the last UUID.
func (g *UUIDv7) next(dst [][16]byte, n int) ([][16]byte, int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Each UUID takes at most 12 random bytes: 4 of its own, 8 to seed.
	if err := g.fill(12 * n); err != nil {
		return dst, 0, err
	}
	for range n {
		ms := g.now().UnixMilli()
		switch {
		case g.reseed:
			g.lastMS, g.counter, g.reseed = max(ms, g.lastMS), g.seed(), false
		case ms > g.lastMS:
			g.lastMS = ms
			g.counter = g.seed()
		case g.counter < uuidCounterMax:
			g.counter++
		default: // rolled over: move the time one ahead, seed again
			g.lastMS++
			g.counter = g.seed()
		}
		dst = append(dst, uuidBytes(g.lastMS, g.counter, g.take32()))
	}
	return dst, g.lastMS, nil
}

// fill makes sure at least need random bytes are buffered.
func (g *UUIDv7) fill(need int) error {
	if len(g.buf) >= need {
		return nil
	}
	more := make([]byte, max(need, 4096))
	if _, err := io.ReadFull(g.rand, more); err != nil {
		return err
	}
	g.buf = append(g.buf, more...)
	return nil
}

// seed is a random counter start with the top bit clear.
func (g *UUIDv7) seed() uint64 {
	return (uint64(g.take32())<<9 ^ uint64(g.take32())) & uuidSeedMask
}

func (g *UUIDv7) take32() uint32 {
	v := binary.BigEndian.Uint32(g.buf)
	g.buf = g.buf[4:]
	return v
}

// uuidBytes lays out one UUIDv7: 48 bits ms, version 7, the counter's top
// 12 bits, variant 10, the counter's low 30 bits, 32 random bits.
func uuidBytes(ms int64, counter uint64, random uint32) [16]byte {
	var u [16]byte
	binary.BigEndian.PutUint64(u[0:8], uint64(ms)<<16|0x7<<12|counter>>30&0xfff)
	binary.BigEndian.PutUint64(u[8:16], 0b10<<62|(counter&(1<<30-1))<<32|uint64(random))
	return u
}

// FormatUUID writes u in the canonical 8-4-4-4-12 lower-case form.
func FormatUUID(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], u[10:16])
	return string(b[:])
}

// ParseUUIDv7 reads a canonical UUID (either case) and returns its bytes
// and its Unix millisecond time; anything that is not a version 7, variant
// 10 UUID is ErrInvalidUUID.
func ParseUUIDv7(s []byte) (u [16]byte, unixMS int64, err error) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, 0, ErrInvalidUUID
	}
	var h [32]byte
	copy(h[0:8], s[0:8])
	copy(h[8:12], s[9:13])
	copy(h[12:16], s[14:18])
	copy(h[16:20], s[19:23])
	copy(h[20:32], s[24:36])
	if _, err := hex.Decode(u[:], h[:]); err != nil {
		return u, 0, ErrInvalidUUID
	}
	if u[6]>>4 != 7 || u[8]>>6 != 0b10 {
		return u, 0, ErrInvalidUUID
	}
	return u, int64(binary.BigEndian.Uint64(u[0:8]) >> 16), nil
}
