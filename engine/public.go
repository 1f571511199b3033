package engine

// Public IDs: a keyed permutation of an ID's bits, so that the numbers a
// client shows the world say nothing of order or volume, and the server,
// which holds the key, turns them back into IDs (see DESIGN.md, "Public IDs").

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// PublicKeyLen is the length in bytes of a public-ID key: an AES-256 key
// (--public-key is 64 hex digits).
const PublicKeyLen = 32

var (
	// ErrPublicKey: a public-ID key that is not PublicKeyLen bytes.
	ErrPublicKey = fmt.Errorf("a public-ID key is %d bytes (%d hex digits)", PublicKeyLen, 2*PublicKeyLen)
	// ErrNotPublicID: a value that is not a public form under this layout
	// (not positive, or not below 2^bits).
	ErrNotPublicID = errors.New("not a public ID")
)

// ParsePublicKey reads a key written as 2*PublicKeyLen hex digits.
func ParsePublicKey(s string) ([]byte, error) {
	if len(s) != 2*PublicKeyLen {
		return nil, fmt.Errorf("%w, got %d characters", ErrPublicKey, len(s))
	}
	key, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPublicKey, err)
	}
	return key, nil
}

// PublicKeyFingerprint names a key without revealing it: 16 hex digits of
// SHA-256 over a fixed label and the key. Logs and refusals show this,
// never the key.
func PublicKeyFingerprint(key []byte) string {
	sum := sha256.Sum256(append([]byte("idserver public-ID key fingerprint\x00"), key...))
	return hex.EncodeToString(sum[:8])
}

// PublicIDs turns IDs of one layout into their public forms and back. A
// public form is FF1 (NIST SP 800-38G, AES-256, radix 2, ten Feistel
// rounds) of the ID's bits: a permutation of [0, 2^bits), walked once more
// should it land on 0, so that every public form is a positive integer
// below 2^bits, as IDs are. Two variants, never mixed:
//
//   - Hide permutes all the bits: nothing of the ID shows.
//   - HideKeepGene permutes the bits above the gene, with the gene as FF1's
//     tweak, and keeps the gene bits as they are, so that the public form
//     of a GENEID still routes (public % 2^k == gene % 2^k).
//
// It is safe for concurrent use.
type PublicIDs struct {
	bits, geneBits int
	whole          ff1 // all bits, no tweak
	high           ff1 // the bits above the gene, the gene as the tweak
}

// minPublicBits is FF1's smallest domain: radix^minlen >= 1,000,000
// (SP 800-38G Rev. 1), 20 bits.
const minPublicBits = 20

// NewPublicIDs makes the permutations of key for the layout l.
func NewPublicIDs(key []byte, l Layout) (*PublicIDs, error) {
	if len(key) != PublicKeyLen {
		return nil, fmt.Errorf("%w, got %d bytes", ErrPublicKey, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	n := l.TimeBits + l.WorkerBits + l.SeqBits
	if n > 63 || n-l.GeneBits < minPublicBits {
		return nil, fmt.Errorf("public IDs need 20 to 63 bits above the gene, the layout has %d of %d", n-l.GeneBits, n)
	}
	p := &PublicIDs{bits: n, geneBits: l.GeneBits}
	if err := p.whole.init(block, 2, n, 0); err != nil {
		return nil, err
	}
	if err := p.high.init(block, 2, n-l.GeneBits, geneTweakLen); err != nil {
		return nil, err
	}
	return p, nil
}

// geneTweakLen: the gene as a 4-byte big-endian tweak.
const geneTweakLen = 4

// Bits is the width of IDs and of their public forms.
func (p *PublicIDs) Bits() int { return p.bits }

func (p *PublicIDs) inRange(x int64) bool { return x > 0 && (p.bits == 63 || x < 1<<p.bits) }

// Hide turns ids, in place, into their public forms (every bit permuted).
// A value that is not positive or not below 2^Bits is ErrNotPublicID, and
// ids is left as it was.
func (p *PublicIDs) Hide(ids []int64) error { return p.each(ids, true, false) }

// Reveal turns public forms made by Hide, in place, back into IDs.
func (p *PublicIDs) Reveal(ids []int64) error { return p.each(ids, false, false) }

// HideKeepGene turns ids, in place, into public forms that keep the low
// gene bits.
func (p *PublicIDs) HideKeepGene(ids []int64) error { return p.each(ids, true, true) }

// RevealKeepGene turns public forms made by HideKeepGene, in place, back
// into IDs.
func (p *PublicIDs) RevealKeepGene(ids []int64) error { return p.each(ids, false, true) }

// scratchPool holds the AES blocks one call works in: a block passed to
// cipher.Block escapes, and a pool keeps the dispatch path free of
// allocations.
var scratchPool = sync.Pool{New: func() any { return new(ff1Scratch) }}

func (p *PublicIDs) each(ids []int64, hide, keepGene bool) error {
	for _, x := range ids {
		if !p.inRange(x) {
			return ErrNotPublicID
		}
	}
	s := scratchPool.Get().(*ff1Scratch)
	defer scratchPool.Put(s)
	for i, x := range ids {
		if keepGene {
			ids[i] = p.keepGene(s, x, hide)
		} else {
			ids[i] = int64(walk(&p.whole, s, nil, uint64(x), hide))
		}
	}
	return nil
}

// keepGene permutes the bits of x above the gene, tweaked by the gene.
func (p *PublicIDs) keepGene(s *ff1Scratch, x int64, hide bool) int64 {
	gene := uint64(x) & (1<<p.geneBits - 1)
	var tweak [geneTweakLen]byte
	binary.BigEndian.PutUint32(tweak[:], uint32(gene))
	hi := uint64(x) >> p.geneBits
	if gene == 0 {
		hi = walk(&p.high, s, tweak[:], hi, hide) // x > 0, so hi > 0: stay off 0
	} else {
		hi = p.high.crypt(s, tweak[:], hi, hide)
	}
	return int64(hi<<p.geneBits | gene)
}

// walk is the cipher on [1, radix^n): FF1 permutes [0, radix^n); a value
// that lands on 0 is put through once more (cycle-walking), which never
// lands on 0 again, since only x maps to 0.
func walk(f *ff1, s *ff1Scratch, tweak []byte, x uint64, hide bool) uint64 {
	y := f.crypt(s, tweak, x, hide)
	if y == 0 {
		y = f.crypt(s, tweak, y, hide)
	}
	return y
}

// ff1 is FF1 (NIST SP 800-38G) on integers: x in [0, radix^n) is the
// numeral string of n digits, most significant first, and NUM and STR are
// the identity. It covers the domains where NUM(B) fits in 4 bytes (so
// that S is one 8-byte y) and the tweak, padding, round and NUM(B) fit in
// one block Q: every layout's ID, and the SP 800-38G samples of radix 10.
type ff1 struct {
	block      cipher.Block
	radix      uint64
	u, v       int    // digits of A and B: floor(n/2), n-u
	powU, powV uint64 // radix^u, radix^v
	b          int    // bytes of NUM(B) in Q
	t          int    // tweak bytes
	cipherP    [16]byte
	binary     bool // radix 2: mod radix^m is a mask, the division is not needed
}

// mod is x mod pow, pow a power of the radix.
func (f *ff1) mod(x, pow uint64) uint64 {
	if f.binary {
		return x & (pow - 1)
	}
	return x % pow
}

// ff1Scratch is the blocks one call works in.
type ff1Scratch struct{ q, r [16]byte }

func (f *ff1) init(block cipher.Block, radix uint64, n, t int) error {
	f.block, f.radix, f.t, f.binary = block, radix, t, radix == 2
	f.u = n / 2
	f.v = n - f.u
	f.powU, f.powV = 1, 1
	for range f.u {
		f.powU *= radix
	}
	for range f.v {
		f.powV *= radix
	}
	// b = ceil(ceil(v * log2(radix)) / 8); ceil(log2(N)) is the bit
	// length of N-1.
	f.b = (bits.Len64(f.powV-1) + 7) / 8
	if hi, _ := bits.Mul64(f.powU, f.powV); n < 2 || hi != 0 || f.b > 4 || t+f.b+1 > 16 {
		return fmt.Errorf("ff1: radix %d, %d digits and a %d-byte tweak are outside what this implementation covers", radix, n, t)
	}
	// P = [1][2][1] [radix]^3 [10] [u mod 256] [n]^4 [t]^4, and the first
	// CBC-MAC block CIPH(P), the same for every input.
	var p [16]byte
	p[0], p[1], p[2] = 1, 2, 1
	p[3], p[4], p[5] = byte(radix>>16), byte(radix>>8), byte(radix)
	p[6], p[7] = 10, byte(f.u)
	binary.BigEndian.PutUint32(p[8:], uint32(n))
	binary.BigEndian.PutUint32(p[12:], uint32(t))
	block.Encrypt(f.cipherP[:], p[:])
	return nil
}

// crypt is FF1.Encrypt (hide) or FF1.Decrypt of x under the tweak.
func (f *ff1) crypt(s *ff1Scratch, tweak []byte, x uint64, hide bool) uint64 {
	a, b := x/f.powV, f.mod(x, f.powV)
	if hide {
		for i := range 10 {
			pow := f.powU
			if i%2 == 1 {
				pow = f.powV
			}
			c := f.mod(a+f.mod(f.round(s, tweak, i, b), pow), pow)
			a, b = b, c
		}
	} else {
		for i := 9; i >= 0; i-- {
			pow := f.powU
			if i%2 == 1 {
				pow = f.powV
			}
			c := f.mod(b+pow-f.mod(f.round(s, tweak, i, a), pow), pow)
			b, a = a, c
		}
	}
	return a*f.powV + b
}

// round is y of round i: NUM(S), S the first 8 bytes of
// R = PRF(P || Q), Q = T || [0]^pad || [i] || [NUM(num)]^b, PRF the
// CBC-MAC of AES, whose first block is CIPH(P).
func (f *ff1) round(s *ff1Scratch, tweak []byte, i int, num uint64) uint64 {
	s.q = [16]byte{}
	copy(s.q[:], tweak)
	s.q[15-f.b] = byte(i)
	for k := range f.b {
		s.q[15-k] = byte(num >> (8 * k))
	}
	for k := range s.q {
		s.q[k] ^= f.cipherP[k]
	}
	f.block.Encrypt(s.r[:], s.q[:])
	return binary.BigEndian.Uint64(s.r[:8])
}
