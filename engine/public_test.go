package engine

import (
	"encoding/hex"
	"errors"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"crypto/aes"

	"idserver/internal/memstore"
	"idserver/internal/testproc"
)

// testPublicKey is a fixed key, from a fixed seed.
func testPublicKey(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 18))
	key := make([]byte, PublicKeyLen)
	for i := range key {
		key[i] = byte(r.Uint32())
	}
	return key
}

func newTestPublic(t testing.TB, key []byte, l Layout) *PublicIDs {
	t.Helper()
	p, err := NewPublicIDs(key, l)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// layout53 is the layout --id-bits 53 gives (for JavaScript): 38 bits of
// 10 ms, 5 of worker, 10 of field, 6 of gene.
var layout53, _ = AutoLayout(53, AutoUnit(53))

// TestFF1MatchesTheNISTSamples: the FF1 under the public IDs gives the
// ciphertexts of SP 800-38G's published samples (FF1samples.pdf) for
// radix 10 (samples 1, 2, 4, 5, 7, 8; 3, 6 and 9 are radix 36 over 19
// digits, beyond 64 bits), and decrypts them back.
func TestFF1MatchesTheNISTSamples(t *testing.T) {
	const k128 = "2B7E151628AED2A6ABF7158809CF4F3C"
	samples := []struct {
		key, tweak string
		want       uint64
	}{
		{k128, "", 2433477484},
		{k128, "39383736353433323130", 6124200773},
		{k128 + "EF4359D8D580AA4F", "", 2830668132},
		{k128 + "EF4359D8D580AA4F", "39383736353433323130", 2496655549},
		{k128 + "EF4359D8D580AA4F7F036D6F04FC6A94", "", 6657667009},
		{k128 + "EF4359D8D580AA4F7F036D6F04FC6A94", "39383736353433323130", 1001623463},
	}
	for i, s := range samples {
		key, _ := hex.DecodeString(s.key)
		tweak, _ := hex.DecodeString(s.tweak)
		block, err := aes.NewCipher(key)
		if err != nil {
			t.Fatal(err)
		}
		var f ff1
		if err := f.init(block, 10, 10, len(tweak)); err != nil {
			t.Fatal(err)
		}
		var sc ff1Scratch
		const plain = 123456789 // "0123456789"
		if got := f.crypt(&sc, tweak, plain, true); got != s.want {
			t.Errorf("sample %d: FF1(0123456789) = %010d, want %010d", i, got, s.want)
		}
		if got := f.crypt(&sc, tweak, s.want, false); got != plain {
			t.Errorf("sample %d: FF1^-1(%010d) = %010d, want 0123456789", i, s.want, got)
		}
	}
}

// consecutiveIDs is n consecutive IDs of layout l: a burst of NEXTID on
// one node fills each time unit's field in order, so its IDs are
// consecutive integers. They start at the first ID a real generator gives
// (worker 3, December 2026).
func consecutiveIDs(t testing.TB, l Layout, n int) []int64 {
	t.Helper()
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	g, err := New(Config{Layout: l, Worker: 3, Window: time.Second, LeaseEndMS: 1 << 40}, func() time.Time { return clock }, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	issued, err := g.NextIDs(nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	first := issued[0]
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = first + int64(i)
	}
	if _, err := l.Decode(ids[n-1]); err != nil || ids[n-1]>>(l.TimeBits+l.WorkerBits+l.SeqBits) != 0 {
		t.Fatalf("the last ID %d is not one of the layout's", ids[n-1])
	}
	return ids
}

// TestPublicIDsArePermutations: over 10^7 consecutive IDs of the default
// layout and 10^6 of a 53-bit one (10^6 and 10^5 under the race detector,
// which makes it ten times slower), both variants give no two IDs the same
// public form, every public form is a positive integer below 2^bits, every
// tenth reverses to its ID, and the gene-keeping variant keeps the gene.
func TestPublicIDsArePermutations(t *testing.T) {
	testproc.Long(t)
	n := 10_000_000
	if raceEnabled || testing.Short() {
		n /= 10
	}
	for _, l := range []Layout{DefaultLayout(), layout53} {
		if l != DefaultLayout() {
			n /= 10
		}
		width := l.TimeBits + l.WorkerBits + l.SeqBits
		ids := consecutiveIDs(t, l, n)
		p := newTestPublic(t, testPublicKey(1), l)
		for _, keep := range []bool{false, true} {
			hide, reveal := p.Hide, p.Reveal
			if keep {
				hide, reveal = p.HideKeepGene, p.RevealKeepGene
			}
			pub := slices.Clone(ids)
			start := time.Now()
			if err := hide(pub); err != nil {
				t.Fatal(err)
			}
			perID := time.Since(start) / time.Duration(n)
			// Every tenth reverses (the whole costs as much again).
			back := make([]int64, 0, n/10)
			for i := 0; i < n; i += 10 {
				back = append(back, pub[i])
			}
			if err := reveal(back); err != nil {
				t.Fatal(err)
			}
			geneMask := int64(1)<<l.GeneBits - 1
			for i, x := range pub {
				switch {
				case x <= 0 || bits.Len64(uint64(x)) > width:
					t.Fatalf("%d-bit, keep gene %v: public form of %d is %d, not in [1, 2^%d)", width, keep, ids[i], x, width)
				case i%10 == 0 && back[i/10] != ids[i]:
					t.Fatalf("%d-bit, keep gene %v: %d -> %d -> %d", width, keep, ids[i], x, back[i/10])
				case keep && x&geneMask != ids[i]&geneMask:
					t.Fatalf("%d-bit: public form %d of %d lost its gene %d", width, x, ids[i], ids[i]&geneMask)
				}
			}
			slices.Sort(pub)
			for i := 1; i < len(pub); i++ {
				if pub[i] == pub[i-1] {
					t.Fatalf("%d-bit, keep gene %v: two IDs share the public form %d", width, keep, pub[i])
				}
			}
			t.Logf("%d-bit layout, keep gene %v: %d consecutive IDs, %d distinct public forms, %d reversed; %v per ID", width, keep, n, n, len(back), perID)
		}
	}
}

// TestPublicIDsStayOffZero: the one ID that FF1 maps to 0 is walked on to
// a positive public form, and back.
func TestPublicIDsStayOffZero(t *testing.T) {
	for _, l := range []Layout{DefaultLayout(), layout53} {
		p := newTestPublic(t, testPublicKey(2), l)
		var s ff1Scratch
		x := int64(p.whole.crypt(&s, nil, 0, false)) // FF1(x) == 0
		one := []int64{x}
		if err := p.Hide(one); err != nil || one[0] <= 0 {
			t.Fatalf("Hide(%d) = %d, %v: want a positive public form", x, one[0], err)
		}
		if err := p.Reveal(one); err != nil || one[0] != x {
			t.Fatalf("Reveal(Hide(%d)) = %d, %v", x, one[0], err)
		}
		var tweak [geneTweakLen]byte // gene 0
		hi := int64(p.high.crypt(&s, tweak[:], 0, false))
		x = hi << l.GeneBits
		one[0] = x
		if err := p.HideKeepGene(one); err != nil || one[0] <= 0 {
			t.Fatalf("HideKeepGene(%d) = %d, %v: want a positive public form", x, one[0], err)
		}
		if err := p.RevealKeepGene(one); err != nil || one[0] != x {
			t.Fatalf("RevealKeepGene(HideKeepGene(%d)) = %d, %v", x, one[0], err)
		}
	}
}

// TestPublicIDsChangeWithTheKey: a key one bit away changes the public
// form of every ID in a sample of 100,000, in both variants.
func TestPublicIDsChangeWithTheKey(t *testing.T) {
	l := DefaultLayout()
	ids := consecutiveIDs(t, l, 100_000)
	key := testPublicKey(3)
	other := slices.Clone(key)
	other[PublicKeyLen-1] ^= 1
	p, q := newTestPublic(t, key, l), newTestPublic(t, other, l)
	for _, keep := range []bool{false, true} {
		a, b := slices.Clone(ids), slices.Clone(ids)
		if keep {
			p.HideKeepGene(a)
			q.HideKeepGene(b)
		} else {
			p.Hide(a)
			q.Hide(b)
		}
		for i := range a {
			if a[i] == b[i] {
				t.Fatalf("keep gene %v: ID %d has the public form %d under both keys", keep, ids[i], a[i])
			}
		}
	}
}

// TestConsecutivePublicIDsLookUnrelated: the public forms of consecutive
// IDs differ in about half their bits (mean Hamming distance within 1 of
// n/2, every bit flipping in 45..55% of pairs), go up about as often as
// down, and the gene variant does the same above the gene. A counter, or
// a weak mixing, fails each of these by far: consecutive IDs differ in
// about 2 bits and always go up.
func TestConsecutivePublicIDsLookUnrelated(t *testing.T) {
	const pairs = 100_000
	for _, l := range []Layout{DefaultLayout(), layout53} {
		width := l.TimeBits + l.WorkerBits + l.SeqBits
		p := newTestPublic(t, testPublicKey(4), l)
		for _, keep := range []bool{false, true} {
			ids := consecutiveIDs(t, l, pairs+1)
			skip := 0
			if keep {
				// Consecutive IDs of one gene: a step of 2^gene_bits.
				for i := range ids {
					ids[i] = ids[0] + int64(i)<<l.GeneBits
				}
				p.HideKeepGene(ids)
				skip = l.GeneBits
			} else {
				p.Hide(ids)
			}
			permuted := width - skip
			var distance, up int
			flips := make([]int, permuted)
			for i := 1; i < len(ids); i++ {
				diff := uint64(ids[i]^ids[i-1]) >> skip
				distance += bits.OnesCount64(diff)
				for b := range permuted {
					flips[b] += int(diff >> b & 1)
				}
				if ids[i] > ids[i-1] {
					up++
				}
			}
			mean := float64(distance) / pairs
			if half := float64(permuted) / 2; mean < half-1 || mean > half+1 {
				t.Errorf("%d-bit, keep gene %v: mean Hamming distance %.2f, want %.1f ± 1", width, keep, mean, half)
			}
			for b, f := range flips {
				if f < pairs*45/100 || f > pairs*55/100 {
					t.Errorf("%d-bit, keep gene %v: bit %d flips in %d of %d pairs", width, keep, b+skip, f, pairs)
				}
			}
			if up < pairs*48/100 || up > pairs*52/100 {
				t.Errorf("%d-bit, keep gene %v: %d of %d consecutive pairs go up, want about half", width, keep, up, pairs)
			}
			t.Logf("%d-bit, keep gene %v: mean Hamming distance %.2f of %d bits, %.1f%% of pairs go up", width, keep, mean, permuted, 100*float64(up)/pairs)
		}
	}
}

// TestPublicIDsRefuseWhatIsNotOne: values that are not positive or not
// below 2^bits are refused and left as they were; so are keys of the wrong
// length.
func TestPublicIDsRefuseWhatIsNotOne(t *testing.T) {
	p := newTestPublic(t, testPublicKey(5), layout53)
	for _, x := range []int64{0, -1, 1 << 53, 1<<63 - 1} {
		for name, f := range map[string]func([]int64) error{"Hide": p.Hide, "Reveal": p.Reveal, "HideKeepGene": p.HideKeepGene, "RevealKeepGene": p.RevealKeepGene} {
			v := []int64{5, x}
			if err := f(v); !errors.Is(err, ErrNotPublicID) || v[0] != 5 || v[1] != x {
				t.Errorf("%s(%d) = %v, %v: want ErrNotPublicID and nothing changed", name, x, v, err)
			}
		}
	}
	for _, s := range []string{"", "00", strings.Repeat("0", 2*PublicKeyLen-1), strings.Repeat("0", 2*PublicKeyLen+2), strings.Repeat("g", 2*PublicKeyLen)} {
		if _, err := ParsePublicKey(s); !errors.Is(err, ErrPublicKey) {
			t.Errorf("ParsePublicKey(%q) = %v, want ErrPublicKey", s, err)
		}
	}
	key, err := ParsePublicKey(strings.Repeat("aB", PublicKeyLen))
	if err != nil || len(key) != PublicKeyLen {
		t.Fatalf("ParsePublicKey of 64 hex digits: %v", err)
	}
	if _, err := NewPublicIDs(key[:16], DefaultLayout()); !errors.Is(err, ErrPublicKey) {
		t.Errorf("a 16-byte key: %v, want ErrPublicKey", err)
	}
	if f := PublicKeyFingerprint(key); len(f) != 16 || strings.Contains(strings.ToLower(hex.EncodeToString(key)), f) {
		t.Errorf("fingerprint %q", f)
	}
}

// TestPublicIDsAllocateNothing: the dispatch path stays at 0 allocs/op.
func TestPublicIDsAllocateNothing(t *testing.T) {
	p := newTestPublic(t, testPublicKey(6), DefaultLayout())
	ids := []int64{12345, 67890}
	if n := testing.AllocsPerRun(1000, func() {
		p.Hide(ids)
		p.RevealKeepGene(ids)
	}); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

func BenchmarkPublicHide(b *testing.B) {
	p := newTestPublic(b, testPublicKey(7), DefaultLayout())
	ids := []int64{1}
	for i := range b.N {
		ids[0] = int64(i) + 1
		p.Hide(ids)
	}
}

// FuzzPublicIDs: any int64 is either refused (not in [1, 2^bits)) or
// turned into a form in range that reverses to it, in both variants, for
// the default and a 53-bit layout.
func FuzzPublicIDs(f *testing.F) {
	for _, x := range []int64{0, 1, -1, 255, 256, 1<<53 - 1, 1 << 53, 1<<63 - 1} {
		f.Add(x)
	}
	ps := []*PublicIDs{newTestPublic(f, testPublicKey(8), DefaultLayout()), newTestPublic(f, testPublicKey(8), layout53)}
	f.Fuzz(func(t *testing.T, x int64) {
		for _, p := range ps {
			valid := x > 0 && bits.Len64(uint64(x)) <= p.Bits()
			for _, pair := range [][2]func([]int64) error{{p.Hide, p.Reveal}, {p.HideKeepGene, p.RevealKeepGene}} {
				v := []int64{x}
				err := pair[0](v)
				if !valid {
					if !errors.Is(err, ErrNotPublicID) || v[0] != x {
						t.Fatalf("%d-bit: %d: %v, %d; want ErrNotPublicID", p.Bits(), x, err, v[0])
					}
					continue
				}
				if err != nil || v[0] <= 0 || bits.Len64(uint64(v[0])) > p.Bits() {
					t.Fatalf("%d-bit: %d -> %d, %v", p.Bits(), x, v[0], err)
				}
				if err := pair[1](v); err != nil || v[0] != x {
					t.Fatalf("%d-bit: %d does not come back: %d, %v", p.Bits(), x, v[0], err)
				}
			}
		}
	})
}
