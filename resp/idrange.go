package resp

import (
	"github.com/tidwall/redcon"
)

// cmdNextIDRuns answers NEXTIDRUNS count: the same count IDs NEXTID count
// would issue, as an array of runs [first, last], each run the consecutive
// integers first..last, runs strictly increasing.
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
	ids, err := s.ids.NextIDs(c.ids[:0], n)
	c.ids = ids[:0]
	if err != nil {
		s.engineError(conn, err)
		return
	}
	s.cmdStats[c.cmd].issued.Add(int64(len(ids)))
	if s.clockBehind.Load() && s.clockBehind.CompareAndSwap(true, false) {
		s.cfg.Logger.Info("clock caught up: issuing IDs again")
	}
	conn.WriteArray(countRuns(ids))
	for first := 0; first < len(ids); {
		last := runEnd(ids, first)
		conn.WriteArray(2)
		conn.WriteInt64(ids[first])
		conn.WriteInt64(ids[last])
		first = last + 1
	}
}

// runEnd is the index of the last ID of the run of consecutive integers
// that starts at ids[first].
func runEnd(ids []int64, first int) int {
	last := first
	for last+1 < len(ids) && ids[last+1] == ids[last]+1 {
		last++
	}
	return last
}

// countRuns is the number of runs of consecutive integers in ids.
func countRuns(ids []int64) int {
	runs := 0
	for first := 0; first < len(ids); first = runEnd(ids, first) + 1 {
		runs++
	}
	return runs
}
