package engine

import (
	"errors"
	"testing"
)

// FuzzDecode: any int64 either is refused as ErrInvalidID (not positive) or
// decodes into parts that rebuild it exactly, for any valid layout.
func FuzzDecode(f *testing.F) {
	for _, seed := range []int64{1, 253001380376084537, 1<<63 - 1, 0, -1, -1 << 63} {
		f.Add(seed, uint8(8))
	}
	f.Fuzz(func(t *testing.T, id int64, geneBits uint8) {
		l := DefaultLayout()
		l.GeneBits = int(geneBits) % (l.SeqBits + 1)
		p, err := l.Decode(id)
		if id <= 0 {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("Decode(%d) = %v, want ErrInvalidID", id, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode(%d): %v", id, err)
		}
		rebuilt := (p.UnixMS-l.Epoch.UnixMilli())<<(l.WorkerBits+l.SeqBits) | p.Worker<<l.SeqBits | p.Sequence<<l.GeneBits | p.Gene
		if rebuilt != id || p.Worker > l.MaxWorker() || p.Gene >= 1<<l.GeneBits {
			t.Fatalf("Decode(%d) = %+v, rebuilt %d", id, p, rebuilt)
		}
	})
}
