package resp

import (
	"bytes"
	"context"
	"time"

	"github.com/tidwall/redcon"
)

// Runs: a pipelined read often holds the same ID command many times over
// (NEXTID, GENEID of one buyer, INCR of one tag). Such a run is answered
// with one engine or segment-buffer call for all of it, one clock read and
// one lock instead of one per command, and counted once: calls, issued
// values and commands by the run's length, so the counters read as if each
// command had run alone. The replies are the values in the order the engine
// handed them out, which is the order the commands came in; the engine's
// per-node order holds within a run as between single calls. A command of
// one is a run of one: NEXTID, GENEID and INCR always take this path.
//
// A run stops at the first frame that differs (another command, another
// key, a count, an incomplete frame); inside MULTI nothing runs, commands
// are queued as before.

// maxRun bounds a run (and so the IDs asked of the engine at once).
const maxRun = MaxCount

// runFunc answers n commands of a run whose key (buyer, tag; nil for
// NEXTID) is key. It returns how many it answered, in order: the last of
// them may be an error reply. The caller dispatches the rest one by one, so
// a run function that answers none (a bad key, an engine error) leaves
// every command to the handler, which answers it exactly as before.
type runFunc func(s *Server, c *client, cn *connection, key []byte, n int) int

// dispatchRun answers the command in frame (whose arguments are args) and
// the run of it that follows in rest; it returns how many bytes of rest
// the run took.
func (s *Server) dispatchRun(c *client, cn *connection, p *frameParser, def *command, args [][]byte, frame, rest []byte) int {
	name := args[0]
	var key []byte
	if len(args) > 1 {
		key = args[1]
	}
	// args belongs to the parser: what the run needs is copied out above
	// before the parser reads ahead (name and key point into the read
	// buffer, or into the parser's inline buffer, which a multibulk frame
	// does not touch). A frame that repeats the first byte for byte is the
	// same command (clients send a run that way) and needs no parsing.
	n, used := 1, 0
	for n < maxRun && used < len(rest) && rest[used] == '*' {
		if bytes.HasPrefix(rest[used:], frame) {
			n++
			used += len(frame)
			continue
		}
		next, size, err := p.parse(rest[used:], false)
		if size == 0 || err != nil || len(next) != len(args) || !bytes.EqualFold(next[0], name) ||
			(key != nil && !bytes.Equal(next[1], key)) {
			break
		}
		n++
		used += size
	}

	if def.newTags && key != nil {
		s.prefetchNewTags(cn, p, def, key, rest[used:])
	}

	c.cmd = def.index
	c.setLastCmd(&def.name)
	st := &s.cmdStats[def.index]
	errorsBefore := c.errors
	// Latency is sampled as for single commands, one command in
	// latencySample; a sampled command of a run is given the run's
	// time divided by its length.
	var began time.Time
	if before := st.calls.Load(); (before+int64(n))/latencySample > before/latencySample {
		began = time.Now()
	}
	done := def.run(s, c, cn, key, n)
	if done > 0 {
		after := st.calls.Add(int64(done))
		if sampled := after/latencySample - (after-int64(done))/latencySample; sampled > 0 && !began.IsZero() {
			each := time.Since(began) / time.Duration(done)
			for range sampled {
				st.observe(each)
			}
		}
		s.stats.commands.Add(int64(done))
		if c.errors != errorsBefore {
			st.errors.Add(1)
		}
	}
	if done < n {
		one := [2][]byte{name, key}
		for range n - done {
			s.dispatch(c, cn, def, one[:len(args)])
		}
	}
	return used
}

// runNextID answers n NEXTIDs from one engine call.
func runNextID(s *Server, c *client, cn *connection, _ []byte, n int) int {
	return s.runIDs(c, cn, n, -1)
}

// runGeneID answers n GENEIDs of one buyer from one engine call.
func runGeneID(s *Server, c *client, cn *connection, buyer []byte, n int) int {
	if len(buyer) == 0 || len(buyer) > MaxKeyLen {
		return 0
	}
	return s.runIDs(c, cn, n, int64(s.ids.Layout().Gene(buyer)))
}

// runIDs issues n IDs of gene (< 0: genes in turn) and writes each as its
// own reply. On an engine error it answers none: the handlers then run one
// by one and answer the error as before (the engine's errors come at once,
// it never waits on anything but its own clock).
func (s *Server) runIDs(c *client, cn *connection, n int, gene int64) int {
	var ids []int64
	var err error
	if gene < 0 {
		ids, err = s.ids.NextIDs(c.ids[:0], n)
	} else {
		ids, err = s.ids.GeneIDs(c.ids[:0], uint32(gene), n)
	}
	c.ids = ids[:0]
	if err != nil {
		return 0
	}
	s.countIssued(c, len(ids))
	var replies intReplies
	for _, id := range ids {
		cn.out = replies.append(cn.out, id)
		cn.grew()
	}
	return len(ids)
}

// intReplies writes the integer replies of a run (":v\r\n" each), each
// from the one before: a run's values increase and lie close together
// (INCR's are consecutive, NEXTID's a gene or a sequence step apart), so a
// reply is the last one's digits with the difference added in place, a few
// digits' work instead of a whole conversion (which was two fifths of the
// command path's CPU at pipeline 32). The bytes are redcon.AppendInt's.
type intReplies struct {
	reply [24]byte // the last reply: ':', its digits, "\r\n"
	size  int      // its length; 0 before the first
	last  int64
}

// append appends v's reply to out.
func (r *intReplies) append(out []byte, v int64) []byte {
	if r.size == 0 || r.last < 0 || v <= r.last || !r.add(uint64(v-r.last)) {
		r.size = len(redcon.AppendInt(r.reply[:0], v))
	}
	r.last = v
	return append(out, r.reply[:r.size]...)
}

// add adds d to the last reply's digits, which are those of a number of at
// least 0; false when the sum has more digits (the reply is then written
// whole).
func (r *intReplies) add(d uint64) bool {
	var carry uint64
	for i := r.size - 3; d > 0 || carry > 0; i-- {
		if i == 0 { // r.reply[0] is ':'
			return false
		}
		x := uint64(r.reply[i]-'0') + d%10 + carry
		r.reply[i] = byte('0' + x%10)
		d, carry = d/10, x/10
	}
	return true
}

// segmentRunner is a SegmentServer that hands out what is left of a
// tag's current segment in one call; *engine.Segments is one.
type segmentRunner interface {
	// NextRun returns between 1 and n contiguous values of tag.
	NextRun(ctx context.Context, tag string, n int64) (first, last int64, err error)
}

// runIncr answers n INCRs of one tag, each with the tag's next value, from
// as few segment-buffer calls as the buffer's segments allow (one, unless
// the run crosses the end of a segment). A failure is that command's error
// reply: the buffer may have waited for a refill already, and the next
// commands of the run are left to their handler.
func runIncr(s *Server, c *client, cn *connection, tag []byte, n int) int {
	if s.cfg.Segments == nil || len(tag) == 0 || len(tag) > MaxKeyLen {
		return 0
	}
	if string(tag) != c.tag {
		c.tag = string(tag)
	}
	runner, _ := s.cfg.Segments.(segmentRunner)
	var replies intReplies
	done := 0
	for done < n {
		var first, last int64
		var err error
		if runner != nil {
			first, last, err = runner.NextRun(s.commands, c.tag, int64(n-done))
		} else {
			first, last, err = s.cfg.Segments.Next(s.commands, c.tag, 1)
		}
		if err != nil {
			s.clusterError(cn, err)
			return done + 1
		}
		got := int(last - first + 1)
		s.cmdStats[c.cmd].issued.Add(int64(got))
		for i := range got { // not v <= last: last may be the largest int64
			cn.out = replies.append(cn.out, first+int64(i))
			cn.grew()
		}
		done += got
	}
	return done
}
