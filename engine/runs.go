package engine

// IDRun is the IDs First..Last, consecutive integers.
type IDRun struct{ First, Last int64 }

// NextIDRuns issues n IDs as NextIDs(dst, n) does, appended to dst as runs
// of consecutive integers, runs strictly increasing: the same IDs, when the
// clock does not move during the call (when it does, a later run may start
// in the new millisecond where NextIDs would fill the old one first). It
// costs a few steps per run and a step per gene rather than per ID, so a
// server can hand out a large batch cheaply.
//
// Within one logical millisecond NEXTID's slots are consecutive (the gene
// turns in the low bits, the sequence above it), and so are their IDs; a
// run ends at the end of the millisecond (the worker bits lie between time
// and field) or at a slot a GENEID has already passed. The first ID of each
// run goes through issue, with every check (lease, borrow, clock, window,
// waits); the rest of the run only lies in the same millisecond as that
// first one, which is what issue would check again for each of them.
//
// As with NextIDs, on an error midway the IDs already taken are dropped:
// a gap, never a repeat.
func (g *Generator) NextIDRuns(dst []IDRun, n int) ([]IDRun, error) {
	start, want := len(dst), n
	var first [1]int64
	var under uint64 // the worker switch the reply's IDs are issued under
	for n > 0 {
		ids, switches, err := g.issueGen(first[:0], 1, -1)
		if err != nil {
			return dst[:start], err
		}
		if len(dst) > start && switches != under {
			// A fresh worker ID since the reply began: start over on it
			// (the IDs taken so far are dropped, a gap), so that the
			// reply's IDs still increase.
			dst, n = dst[:start], want
		}
		under = switches
		n--
		dst = appendID(dst, start, IDRun{ids[0], ids[0]})
		if n == 0 {
			break
		}
		g.mu.Lock()
		r, k := IDRun{}, 0
		if g.switches == switches { // not on a fresh worker since (SwitchWorker)
			r, k = g.extendRun(ids[0]>>g.timeShift, n)
		}
		g.mu.Unlock()
		if k > 0 {
			dst = appendID(dst, start, r)
			n -= k
		}
	}
	return dst, nil
}

// appendID appends r to the runs dst[start:], merging it into the last one
// when it continues it.
func appendID(dst []IDRun, start int, r IDRun) []IDRun {
	if len(dst) > start && dst[len(dst)-1].Last+1 == r.First {
		dst[len(dst)-1].Last = r.Last
		return dst
	}
	return append(dst, r)
}

// extendRun issues up to want more NEXTID slots in logical millisecond t,
// as long as they are consecutive, and returns them as a run of IDs with
// their number (0 when the next slot lies in another millisecond, or the
// generator is closed). issue has let out a slot in t since the lease,
// window and borrow were last checked: they hold for all of t (the lease
// and the window only grow; Close, which lowers the window, sets closed).
// g.mu is held.
func (g *Generator) extendRun(t int64, want int) (IDRun, int) {
	if g.closed {
		return IDRun{}, 0
	}
	// The next slot, as issue computes it for gene < 0 when it is free;
	// when a GENEID took it, issue steps over it and starts the next run.
	lo := max(g.floor, g.lastNext)
	s0 := lo&^g.geneMask | g.cursor
	if s0 <= lo {
		s0 += g.geneStep
	}
	if s0>>g.seqBits != t || s0 <= g.lanes[s0&g.geneMask] {
		return IDRun{}, 0
	}
	// After slot x, issue's next slot is x+1 unless a GENEID already took a
	// slot of x+1's gene at or above x+1 (lanes[gene] >= x+1). A gene's
	// later slots lie above its first one, so only the first step of genes
	// past s0 can stop the run; past them, only the millisecond's end.
	limit := min(int64(want), (t+1)<<g.seqBits-s0)
	k := int64(1)
	for ; k < limit && k < g.geneStep; k++ {
		if x := s0 + k; g.lanes[x&g.geneMask] >= x {
			break
		}
	}
	if k == g.geneStep {
		k = limit
	}
	last := s0 + k - 1
	for x := max(s0, last-g.geneStep+1); x <= last; x++ {
		g.lanes[x&g.geneMask] = x
	}
	g.lastNext = last
	g.cursor = (last + 1) & g.geneMask
	g.maxIssued = max(g.maxIssued, last)
	return IDRun{g.slotID(s0), g.slotID(last)}, int(k)
}

// slotID is the ID of a slot: its time, the worker, its field.
func (g *Generator) slotID(slot int64) int64 {
	return slot>>g.seqBits<<g.timeShift | g.worker | slot&g.fieldMask
}

// GeneIDRuns issues n IDs of gene as GeneIDs(dst, gene, n) does, appended
// to dst as runs whose IDs step by 2^GeneBits (GeneStep): run r holds
// r.First, r.First+GeneStep, ..., r.Last. Within a time unit one gene's
// slots are a gene step apart, so a batch is a run per unit it spans (plus
// one wherever a NEXTID took a slot of the gene in between), and a client
// expands them without parsing an integer per ID.
//
// As with NextIDRuns, the first ID of each run goes through issue with
// every check, the rest only lies in the same unit; on an error midway the
// IDs already taken are dropped.
func (g *Generator) GeneIDRuns(dst []IDRun, gene uint32, n int) ([]IDRun, error) {
	start := len(dst)
	gn := int64(gene) & g.geneMask
	var first [1]int64
	for n > 0 {
		ids, err := g.issue(first[:0], 1, gn)
		if err != nil {
			return dst[:start], err
		}
		n--
		dst = appendStep(dst, start, IDRun{ids[0], ids[0]}, g.geneStep)
		if n == 0 {
			break
		}
		g.mu.Lock()
		r, k := g.extendGeneRun(ids[0]>>g.timeShift, gn, n)
		g.mu.Unlock()
		if k > 0 {
			dst = appendStep(dst, start, r, g.geneStep)
			n -= k
		}
	}
	return dst, nil
}

// GeneStep is the distance between two consecutive IDs of one gene in one
// time unit: 2^GeneBits.
func (g *Generator) GeneStep() int64 { return g.geneStep }

// appendStep appends r (IDs step apart) to the runs dst[start:], merging it
// into the last one when it continues it.
func appendStep(dst []IDRun, start int, r IDRun, step int64) []IDRun {
	if len(dst) > start && dst[len(dst)-1].Last+step == r.First {
		dst[len(dst)-1].Last = r.Last
		return dst
	}
	return append(dst, r)
}

// extendGeneRun issues up to want more slots of gene gn in time unit t, as
// issue computes them for one gene (each the next of the gene's lane), and
// returns them as a run of IDs a gene step apart, with their number (0 when
// the gene's next slot lies in another unit, or the generator is closed).
// issue has just let out a slot of gn in t, so the lease, window and
// borrow hold for all of t (see extendRun). g.mu is held.
func (g *Generator) extendGeneRun(t, gn int64, want int) (IDRun, int) {
	if g.closed {
		return IDRun{}, 0
	}
	lo := max(g.floor, g.lanes[gn])
	s0 := lo&^g.geneMask | gn
	if s0 <= lo {
		s0 += g.geneStep
	}
	if s0>>g.seqBits != t {
		return IDRun{}, 0
	}
	lastInUnit := ((t+1)<<g.seqBits-1)&^g.geneMask | gn
	k := min(int64(want), (lastInUnit-s0)/g.geneStep+1)
	last := s0 + (k-1)*g.geneStep
	g.lanes[gn] = last
	g.maxIssued = max(g.maxIssued, last)
	return IDRun{g.slotID(s0), g.slotID(last)}, int(k)
}
