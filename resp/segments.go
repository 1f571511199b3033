package resp

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"idserver/engine"
)

// SegmentServer serves values of tags from local buffers; *engine.Segments
// is one.
type SegmentServer interface {
	Next(ctx context.Context, tag string, n int64) (first, last int64, err error)
}

// ClusterNode is the cluster as the wire needs it; *cluster.Cluster is one.
type ClusterNode interface {
	Allocate(ctx context.Context, tag string, n int64) (first, last int64, err error)
	Set(ctx context.Context, tag string, v int64) error
	Get(tag string) (int64, bool)
	High(ctx context.Context, tag string) (int64, bool)
	Size() int
	Join(ctx context.Context, node, raftAddr, respAddr string) (worker, startAboveMS, leaseEndMS int64, err error)
	Forget(ctx context.Context, node string) error
	Leader() (string, bool)
	Info() [][2]string
}

// MaxSegment is the largest n NEXTSEG takes.
const MaxSegment = 1_000_000_000

// requestTimeout bounds how long one command waits for the cluster:
// Config.RequestTimeout, derived from the cluster's timings.
func (s *Server) requestTimeout() time.Duration {
	if s.cfg.RequestTimeout > 0 {
		return s.cfg.RequestTimeout
	}
	return 10 * time.Second
}

func init() {
	for _, d := range []*command{
		{name: "nextseg", arity: 3, flags: []string{"write", "fast"}, summary: "Reserve n contiguous values of a tag: [first, last]", handler: cmdNextSeg},
		{name: "incr", arity: 2, flags: []string{"write", "fast"}, summary: "The next value of a tag", handler: cmdIncr},
		{name: "incrby", arity: 3, flags: []string{"write", "fast"}, summary: "Reserve n values of a tag, return the last", handler: cmdIncrBy},
		{name: "get", arity: 2, flags: []string{"readonly", "fast"}, summary: "A tag's cluster-wide allocation high-water", handler: cmdGet},
		{name: "set", arity: -3, flags: []string{"write"}, summary: "Raise a tag: every later value is above v", handler: cmdSet},
		{name: "exists", arity: -2, flags: []string{"readonly", "fast"}, summary: "How many of the tags exist", handler: cmdExists},
		{name: "dbsize", arity: 1, flags: []string{"readonly", "fast"}, summary: "The number of tags", handler: cmdDBSize},
		{name: "decr", arity: 2, flags: []string{"write"}, summary: "Refused: values never go back", handler: cmdNeverBack},
		{name: "decrby", arity: 3, flags: []string{"write"}, summary: "Refused: values never go back", handler: cmdNeverBack},
		{name: "del", arity: -2, flags: []string{"write"}, summary: "Refused: values never go back", handler: cmdNeverBack},
		{name: "cluster", arity: -2, flags: []string{"admin"}, summary: "INFO, LEADER, JOIN, FORGET", handler: cmdCluster},
	} {
		commandTable[d.name] = d
	}
	indexCommands()
}

// clusterError puts a segment or cluster error on the wire.
func (s *Server) clusterError(conn redcon.Conn, err error) {
	switch {
	case errors.Is(err, engine.ErrNoLeader), errors.Is(err, context.DeadlineExceeded):
		s.errorReply(conn, "TRYAGAIN no leader and nothing buffered; try again")
	case errors.Is(err, engine.ErrOverflow):
		s.errorReply(conn, "ERR increment or decrement would overflow")
	default:
		msg := err.Error()
		if !errors.Is(err, engine.ErrWouldGoBack) {
			s.cfg.Logger.Warn("cluster request failed", "err", err)
		}
		s.errorReply(conn, "ERR "+msg)
	}
}

func (s *Server) validTag(conn redcon.Conn, tag []byte) bool { return s.validKey(conn, "tag", tag) }

// next serves n values of tag, or writes the error.
func (s *Server) next(c *client, conn redcon.Conn, tag []byte, n int64) (int64, int64, bool) {
	if s.cfg.Segments == nil {
		s.errorReply(conn, "ERR segments are not served by this node")
		return 0, 0, false
	}
	// No per-request timer on the hot path: Segments bounds its own waits.
	first, last, err := s.cfg.Segments.Next(context.Background(), string(tag), n)
	if err != nil {
		s.clusterError(conn, err)
		return 0, 0, false
	}
	s.cmdStats[c.cmd].issued.Add(n)
	return first, last, true
}

func cmdNextSeg(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.validTag(conn, args[1]) {
		return
	}
	n, ok := parseInt64(args[2])
	if !ok {
		s.errorReply(conn, errNotInteger)
		return
	}
	if n < 1 || n > MaxSegment {
		s.errorReply(conn, "ERR n is out of range, must be between 1 and "+strconv.Itoa(MaxSegment))
		return
	}
	if first, last, ok := s.next(c, conn, args[1], n); ok {
		conn.WriteArray(2)
		conn.WriteInt64(first)
		conn.WriteInt64(last)
	}
}

func cmdIncr(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.validTag(conn, args[1]) {
		return
	}
	if _, last, ok := s.next(c, conn, args[1], 1); ok {
		conn.WriteInt64(last)
	}
}

func cmdIncrBy(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.validTag(conn, args[1]) {
		return
	}
	n, ok := parseInt64(args[2])
	if !ok {
		s.errorReply(conn, errNotInteger)
		return
	}
	if n < 1 {
		s.errorReply(conn, "ERR values never go back: INCRBY takes an increment of at least 1")
		return
	}
	if n > MaxSegment {
		s.errorReply(conn, "ERR increment is out of range, must be at most "+strconv.Itoa(MaxSegment))
		return
	}
	if _, last, ok := s.next(c, conn, args[1], n); ok {
		conn.WriteInt64(last)
	}
}

func (s *Server) needCluster(conn redcon.Conn) bool {
	if s.cfg.Cluster == nil {
		s.errorReply(conn, "ERR this node runs without a cluster")
		return false
	}
	return true
}

func cmdGet(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.validTag(conn, args[1]) || !s.needCluster(conn) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
	defer cancel()
	v, ok := s.cfg.Cluster.High(ctx, string(args[1]))
	if !ok {
		writeNull(conn, c)
		return
	}
	conn.WriteBulkString(strconv.FormatInt(v, 10))
}

func cmdSet(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if len(args) > 3 {
		// Redis's SET options (EX, NX, GET, ...) mean nothing for ID tags.
		s.errorReply(conn, "ERR syntax error")
		return
	}
	if !s.validTag(conn, args[1]) || !s.needCluster(conn) {
		return
	}
	v, ok := parseInt64(args[2])
	if !ok {
		s.errorReply(conn, errNotInteger)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
	defer cancel()
	if err := s.cfg.Cluster.Set(ctx, string(args[1]), v); err != nil {
		s.clusterError(conn, err)
		return
	}
	conn.WriteString("OK")
}

func cmdExists(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.needCluster(conn) {
		return
	}
	n := 0
	for _, tag := range args[1:] {
		if _, ok := s.cfg.Cluster.Get(string(tag)); ok {
			n++
		}
	}
	conn.WriteInt(n)
}

func cmdDBSize(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.needCluster(conn) {
		return
	}
	conn.WriteInt(s.cfg.Cluster.Size())
}

func cmdNeverBack(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	s.errorReply(conn, "ERR values never go back: "+strings.ToUpper(string(args[0]))+" is not supported on ID tags")
}

// cmdCluster: INFO, LEADER, and the admin commands JOIN node raft resp
// (which --join sends) and FORGET node. Node-to-node requests are not here:
// they travel on the Raft port.
func cmdCluster(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.needCluster(conn) {
		return
	}
	sub := strings.ToLower(string(args[1]))
	arity := map[string]int{"info": 2, "leader": 2, "join": 5, "forget": 3}
	want, known := arity[sub]
	if !known {
		s.errorReply(conn, "ERR unknown subcommand '"+clip(args[1], 128)+"'. Try CLUSTER HELP.")
		return
	}
	if len(args) != want {
		s.errorReply(conn, wrongArity("cluster|"+sub))
		return
	}
	cl := s.cfg.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
	defer cancel()
	switch sub {
	case "info":
		var b strings.Builder
		for _, kv := range cl.Info() {
			b.WriteString(kv[0] + ":" + kv[1] + "\r\n")
		}
		conn.WriteBulkString(b.String())
	case "leader":
		if addr, ok := cl.Leader(); ok {
			conn.WriteBulkString(addr)
		} else {
			writeNull(conn, c)
		}
	case "join":
		worker, above, lease, err := cl.Join(ctx, string(args[2]), string(args[3]), string(args[4]))
		if err != nil {
			s.clusterError(conn, err)
			return
		}
		conn.WriteArray(3)
		conn.WriteInt64(worker)
		conn.WriteInt64(above)
		conn.WriteInt64(lease)
	case "forget":
		if err := cl.Forget(ctx, string(args[2])); err != nil {
			s.clusterError(conn, err)
			return
		}
		conn.WriteString("OK")
	}
}
