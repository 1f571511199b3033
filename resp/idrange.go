package resp

import (
	"github.com/tidwall/redcon"

	"idserver/engine"
)

// runIssuer is an IDSource that issues NEXTID's IDs as runs itself, a step
// per run rather than per ID (engine.Generator); other sources' IDs are cut
// into runs here.
type runIssuer interface {
	NextIDRuns(dst []engine.IDRun, n int) ([]engine.IDRun, error)
}

// cmdNextIDRuns answers NEXTIDRUNS count: count IDs, as NEXTID count issues
// them, as runs in a flat array first1, last1, first2, last2, ...: each
// run the consecutive integers first..last, runs strictly increasing. One
// run is NEXTSEG's [first, last]; a flat array of integers is what every
// client reads cheapest (go-redis: one slice, no value boxed).
//
// Within one logical millisecond NEXTID's IDs are consecutive integers (the
// gene turns in the low bits, the sequence above it), so a batch is a few
// runs: one per millisecond it spans, plus one wherever a GENEID took a slot
// in between. A client expands the runs itself, where NEXTID count costs a
// RESP integer per ID to format and to parse. At worst (every ID its own
// run) the reply is twice as long as NEXTID's.
func cmdNextIDRuns(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	n, ok := s.parseCount(conn, args[1])
	if !ok {
		return
	}
	var runs []engine.IDRun
	var err error
	if ri, ok := s.ids.(runIssuer); ok {
		runs, err = ri.NextIDRuns(make([]engine.IDRun, 0, 8), n)
	} else {
		var ids []int64
		ids, err = s.ids.NextIDs(c.ids[:0], n)
		c.ids = ids[:0]
		runs = appendStepRuns(nil, ids, 1)
	}
	s.writeRuns(c, conn, runs, n, err)
}

// writeRuns answers n IDs issued as runs, a flat array first1, last1,
// first2, last2, ..., or the engine's error.
func (s *Server) writeRuns(c *client, conn redcon.Conn, runs []engine.IDRun, n int, err error) {
	if err != nil {
		s.engineError(conn, err)
		return
	}
	s.countIssued(c, n)
	conn.WriteArray(2 * len(runs))
	for _, r := range runs {
		conn.WriteInt64(r.First)
		conn.WriteInt64(r.Last)
	}
}

// geneRunIssuer is an IDSource that issues one gene's IDs as runs itself
// (engine.Generator); other sources' IDs are cut into runs here.
type geneRunIssuer interface {
	GeneIDRuns(dst []engine.IDRun, gene uint32, n int) ([]engine.IDRun, error)
}

// cmdGeneIDRuns answers GENEIDRUNS buyer count: count IDs of gene(buyer),
// as GENEID buyer count issues them, in NEXTIDRUNS's shape: a flat array
// first1, last1, first2, last2, ..., where a run holds first, first+step,
// ..., last with step = 2^gene-bits (INFO snowflake's layout), runs
// strictly increasing. Within one time unit a gene's IDs are a step apart,
// so a batch is a run per unit it spans, plus one wherever a NEXTID took a
// slot of the gene in between.
func cmdGeneIDRuns(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.validKey(conn, "buyer", args[1]) {
		return
	}
	n, ok := s.parseCount(conn, args[2])
	if !ok {
		return
	}
	l := s.ids.Layout()
	gene := l.Gene(args[1])
	var runs []engine.IDRun
	var err error
	if ri, ok := s.ids.(geneRunIssuer); ok {
		runs, err = ri.GeneIDRuns(make([]engine.IDRun, 0, 8), gene, n)
	} else {
		var ids []int64
		ids, err = s.ids.GeneIDs(c.ids[:0], gene, n)
		c.ids = ids[:0]
		runs = appendStepRuns(nil, ids, 1<<l.GeneBits)
	}
	s.writeRuns(c, conn, runs, n, err)
}

// appendStepRuns appends ids, increasing, to dst as runs of IDs step apart
// (1: consecutive integers, as NEXTID issues them within a millisecond).
func appendStepRuns(dst []engine.IDRun, ids []int64, step int64) []engine.IDRun {
	for i, id := range ids {
		if i > 0 && ids[i-1]+step == id {
			dst[len(dst)-1].Last = id
		} else {
			dst = append(dst, engine.IDRun{First: id, Last: id})
		}
	}
	return dst
}
