package resp

import (
	"bytes"
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
	// Set raises tag to v; cond is "", "NX" or "XX", decided atomically
	// with the raise. It returns the high-water before and whether the tag
	// existed (so whether an NX or XX SET applied).
	Set(ctx context.Context, tag string, v int64, cond string) (old int64, existed bool, err error)
	// MSet raises each of tags to at least values[i], all of one entry or
	// none (cluster.MSet).
	MSet(ctx context.Context, tags []string, values []int64) error
	Get(tag string) (int64, bool)
	High(ctx context.Context, tag string) (int64, bool, error)
	Size() int
	// ScanTags pages over the tags in sorted order: up to count tags from
	// cursor, and the next cursor (0 after the last page).
	ScanTags(cursor uint64, count int) (next uint64, tags []string)
	Join(ctx context.Context, node, raftAddr, respAddr string) (worker, startAboveMS, leaseEndMS int64, err error)
	Forget(ctx context.Context, node string) error
	Leader() (string, bool)
	Info() [][2]string
	// Backup is a consistent image of this node's state (CLUSTER BACKUP,
	// what `idserver backup` reads).
	Backup() ([]byte, error)
}

// Key positions for COMMAND INFO, so that cluster-aware clients and
// proxies find the tag.
var (
	oneKey  = [3]int{1, 1, 1}
	allKeys = [3]int{1, -1, 1}
)

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

// tagCommands reserve, read and set the values of tags.
func tagCommands() []*command {
	return []*command{
		{name: "nextseg", arity: 3, keys: oneKey, flags: []string{"write", "fast"}, summary: "Reserve n contiguous values of a tag: [first, last]", handler: cmdNextSeg},
		{name: "incr", arity: 2, keys: oneKey, flags: []string{"write", "fast"}, summary: "The next value of a tag", handler: cmdIncr, run: runIncr, runArgs: 2, newTags: true},
		{name: "incrby", arity: 3, keys: oneKey, flags: []string{"write", "fast"}, summary: "Reserve n values of a tag, return the last", handler: cmdIncrBy},
		{name: "get", arity: 2, keys: oneKey, flags: []string{"readonly", "fast"}, summary: "A tag's cluster-wide allocation high-water", handler: cmdGet},
		{name: "set", arity: -3, keys: oneKey, flags: []string{"write"}, summary: "Set a tag: every later value is above v (refused below a value already issued); NX, XX, GET as Redis", handler: cmdSet},
		{name: "setnx", arity: 3, keys: oneKey, flags: []string{"write", "fast"}, summary: "Create a tag at v if it does not exist", handler: cmdSetNX},
		{name: "exists", arity: -2, keys: allKeys, flags: []string{"readonly", "fast"}, summary: "How many of the tags exist", handler: cmdExists},
		{name: "scan", arity: -2, flags: []string{"readonly"}, summary: "Page over the tags: SCAN cursor [MATCH pattern] [COUNT n] [TYPE string]", handler: cmdScan},
		{name: "type", arity: 2, keys: oneKey, flags: []string{"readonly", "fast"}, summary: "string for a tag, none for an unknown one", handler: cmdType},
		{name: "dbsize", arity: 1, flags: []string{"readonly", "fast"}, summary: "The number of tags", handler: cmdDBSize},
		{name: "decr", arity: 2, keys: oneKey, flags: []string{"write"}, summary: "Refused: values never go back", handler: cmdNeverBack},
		{name: "decrby", arity: 3, keys: oneKey, flags: []string{"write"}, summary: "Refused: values never go back", handler: cmdNeverBack},
		{name: "del", arity: -2, keys: allKeys, flags: []string{"write"}, summary: "Refused: values never go back", handler: cmdNeverBack},
		{name: "cluster", arity: -2, subs: map[string]int{"help": 2, "info": 2, "leader": 2, "join": 5, "forget": 3, "backup": 2,
			"slots": 2, "shards": 2, "nodes": 2, "myid": 2, "myshardid": 2, "keyslot": 3, "countkeysinslot": 3, "getkeysinslot": 4},
			flags: []string{"admin"}, summary: "INFO, LEADER, JOIN, FORGET, BACKUP; SLOTS, SHARDS, NODES, MYID, KEYSLOT, COUNTKEYSINSLOT as an emulated Redis Cluster", handler: cmdCluster},
	}
}

// clusterError puts a segment or cluster error on the wire.
func (s *Server) clusterError(conn redcon.Conn, err error) {
	switch {
	case errors.Is(err, engine.ErrNoLeader), errors.Is(err, context.DeadlineExceeded):
		// The error's detail says why, when it has one (a FORGET of the
		// leader: leadership is moving).
		msg := "no leader reachable for this request; try again"
		if nl := (*engine.NoLeaderError)(nil); errors.As(err, &nl) && nl.Detail != "" {
			msg += " (" + nl.Detail + ")"
		}
		s.errorReply(conn, "TRYAGAIN "+msg)
	case errors.Is(err, engine.ErrOverflow):
		s.errorReply(conn, "ERR increment or decrement would overflow")
	default:
		msg := err.Error()
		// A refusal of the client's own request (docs/commands.md) is its
		// reply alone: a client looping on it must not fill the log.
		refused := errors.Is(err, engine.ErrWouldGoBack) || errors.Is(err, engine.ErrTagLimit)
		if !refused && s.commands.Err() == nil { // not ended by Close
			s.cfg.Logger.Warn("cluster request failed", "err", err)
		}
		s.errorReply(conn, "ERR "+msg)
	}
}

// segmentPrefetcher starts the first segments of several tags together;
// *engine.Segments is one.
type segmentPrefetcher interface {
	// Buffered reports whether tag has a buffer on this node.
	Buffered(tag string) bool
	// Prefetch starts the first segment of each of tags that has none,
	// without waiting.
	Prefetch(tags []string)
}

// maxLookahead bounds the frames prefetchNewTags parses ahead, and so the
// tags whose first segments one batch asks for (the leader's group commit
// takes up to as many allocations in one log entry).
const maxLookahead = 1024

// prefetchNewTags: a command of def on a tag this node holds no buffer of
// looks ahead in the read buffer (rest, after its run) over the frames of
// the same command, and starts the first segments of all their tags
// together: a pipeline of many new tags then costs a few allocation rounds
// (log entries, requests to the leader) instead of one each. The lookahead
// stops at the first other frame: only a tag whose command comes next
// after commands that run is asked for. Each command still runs in its
// turn and waits for its own segment.
//
// A lookahead that runs out of read commands before its bound (the rest
// are still on their way) has the connection read more at once from then
// on (readAheadSize), so that the next lookahead sees up to its bound.
func (s *Server) prefetchNewTags(cn *connection, p *frameParser, def *command, tag, rest []byte) {
	pf, ok := s.cfg.Segments.(segmentPrefetcher)
	if !ok || s.cfg.EmulateCluster || len(tag) == 0 || len(tag) > MaxKeyLen || pf.Buffered(string(tag)) {
		return
	}
	tags := []string{string(tag)}
	used, frames := 0, 0
	for ; frames < maxLookahead && used < len(rest) && rest[used] == '*'; frames++ {
		args, size, err := p.parse(rest[used:], false)
		if size == 0 && err == nil {
			used = len(rest) // an incomplete frame: the rest is on its way
			break
		}
		if err != nil || len(args) != def.runArgs || !bytes.EqualFold(args[0], []byte(def.name)) {
			break
		}
		used += size
		if len(args[1]) > 0 && len(args[1]) <= MaxKeyLen && !bytes.Equal(args[1], tag) {
			tags = append(tags, string(args[1]))
		}
	}
	if used == len(rest) && frames < maxLookahead && len(tags) > 1 {
		cn.readAhead = true
	}
	pf.Prefetch(tags)
}

func (s *Server) validTag(conn redcon.Conn, tag []byte) bool { return s.validKey(conn, "tag", tag) }

// next serves n values of tag, or writes the error.
func (s *Server) next(c *client, conn redcon.Conn, tag []byte, n int64) (int64, int64, bool) {
	if s.cfg.Segments == nil {
		s.errorReply(conn, "ERR segments are not served by this node")
		return 0, 0, false
	}
	// No per-request timer on the hot path: Segments bounds its own waits.
	first, last, err := s.cfg.Segments.Next(s.commands, string(tag), n)
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
	ctx, cancel := context.WithTimeout(s.commands, s.requestTimeout())
	defer cancel()
	v, ok, err := s.cfg.Cluster.High(ctx, string(args[1]))
	switch {
	case err != nil:
		s.clusterError(conn, err)
		return
	case !ok:
		s.stats.keyspaceMisses.Add(1)
		writeNull(conn, c)
		return
	}
	s.stats.keyspaceHits.Add(1)
	conn.WriteBulkString(strconv.FormatInt(v, 10))
}

// setOptions are SET's options after the value.
type setOptions struct {
	cond   string // "", "NX" or "XX"
	get    bool
	expire string // EX, PX, EXAT, PXAT or KEEPTTL: refused, tags never expire
}

// parseSetOptions follows Redis's parser: the same conflicts are a syntax
// error, and an expiry's argument must be a positive integer.
func (s *Server) parseSetOptions(conn redcon.Conn, args [][]byte) (setOptions, bool) {
	var o setOptions
	var expireArg []byte
	for i := 0; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch {
		case opt == "NX" && o.cond != "XX", opt == "XX" && o.cond != "NX":
			o.cond = opt
		case opt == "GET":
			o.get = true
		case opt == "KEEPTTL" && (o.expire == "" || o.expire == "KEEPTTL"):
			o.expire = opt
		case (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") && (o.expire == "" || o.expire == opt) && i+1 < len(args):
			o.expire = opt
			i++
			expireArg = args[i]
		default:
			s.errorReply(conn, "ERR syntax error")
			return o, false
		}
	}
	if expireArg != nil {
		n, ok := parseInt64(expireArg)
		if !ok {
			s.errorReply(conn, errNotInteger)
			return o, false
		}
		if n <= 0 {
			s.errorReply(conn, "ERR invalid expire time in 'set' command")
			return o, false
		}
	}
	if o.expire != "" {
		s.errorReply(conn, "ERR tags never expire: SET "+o.expire+" is not supported")
		return o, false
	}
	return o, true
}

// set runs SET tag v with a condition; applied says whether it raised the tag.
func (s *Server) set(conn redcon.Conn, tag, value []byte, cond string) (old int64, existed, applied, ok bool) {
	if !s.validTag(conn, tag) || !s.needCluster(conn) {
		return 0, false, false, false
	}
	v, isInt := parseInt64(value)
	if !isInt {
		s.errorReply(conn, errNotInteger)
		return 0, false, false, false
	}
	if v < 0 {
		s.errorReply(conn, "ERR value is out of range: a tag's values are not negative")
		return 0, false, false, false
	}
	ctx, cancel := context.WithTimeout(s.commands, s.requestTimeout())
	defer cancel()
	old, existed, err := s.cfg.Cluster.Set(ctx, string(tag), v, cond)
	if err != nil {
		s.clusterError(conn, err)
		return 0, false, false, false
	}
	applied = cond == "" || (cond == "NX") != existed
	return old, existed, applied, true
}

// cmdSet: SET tag v [NX|XX] [GET]. GET answers the high-water before.
func cmdSet(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	o, ok := s.parseSetOptions(conn, args[3:])
	if !ok {
		return
	}
	old, existed, applied, ok := s.set(conn, args[1], args[2], o.cond)
	switch {
	case !ok:
	case o.get && existed:
		conn.WriteBulkString(strconv.FormatInt(old, 10))
	case o.get || !applied:
		writeNull(conn, c)
	default:
		conn.WriteString("OK")
	}
}

// cmdSetNX: SETNX tag v, 1 when it created the tag.
func cmdSetNX(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if _, _, applied, ok := s.set(conn, args[1], args[2], "NX"); ok {
		conn.WriteInt(b2i(applied))
	}
}

func cmdExists(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.needCluster(conn) {
		return
	}
	n := 0
	for _, tag := range args[1:] {
		if s.lookupTag(tag) {
			n++
		}
	}
	conn.WriteInt(n)
}

// lookupTag reports whether tag is known, counted as Redis counts a read
// in keyspace_hits and keyspace_misses.
func (s *Server) lookupTag(tag []byte) bool {
	_, ok := s.cfg.Cluster.Get(string(tag))
	if ok {
		s.stats.keyspaceHits.Add(1)
	} else {
		s.stats.keyspaceMisses.Add(1)
	}
	return ok
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
	cl := s.cfg.Cluster
	ctx, cancel := context.WithTimeout(s.commands, s.requestTimeout())
	defer cancel()
	if s.clusterMode(c, conn, sub, args) {
		return
	}
	switch sub {
	case "info":
		var b strings.Builder
		for _, line := range s.clusterInfoLines(c) {
			b.WriteString(line + "\r\n")
		}
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
	case "backup":
		img, err := cl.Backup()
		if err != nil {
			s.errorReply(conn, "ERR backup: "+err.Error())
			return
		}
		conn.WriteBulk(img)
	}
}
