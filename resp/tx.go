package resp

import (
	"slices"

	"github.com/tidwall/redcon"
)

// Transactions: MULTI queues, EXEC runs the queue in order and answers the
// array of replies, DISCARD drops it. As in Redis, an error while queueing
// (unknown command, wrong arity) makes EXEC answer EXECABORT, and a command
// that fails while EXEC runs is one error element of the array.
//
// EXEC runs the queued commands one after the other on this connection;
// other clients' commands may run between them. Values stay unique, but a
// transaction is not isolated as it is in Redis, where nothing else runs
// during EXEC.
//
// WATCH is refused: idserver cannot make "the watched tag did not change"
// and the queued SET one step across nodes, and the idiom WATCH exists for
// (GET, then SET a block above it) would hand out values another node is
// issuing. INCRBY and SET NX do those jobs atomically. So that a client
// that ignores the refusal is not misled, the next EXEC on the connection
// fails with EXECABORT.
//
// EXEC's replies stream as they grow (conn.go): a transaction of 100,000
// UUIDV7 10000 is 43 GB of replies, written in chunks of the client output
// limit as the client reads them. When the connection fails on the way (the
// client left, or read nothing for the client output timeout and was
// closed), EXEC still runs the queued commands that change state (SET,
// SETNX, CLUSTER, ...), so that the transaction does what it was sent to
// do, as Redis runs the whole of it, and skips the others: reads, whose
// replies no one can receive, and the commands whose only effect is the
// values in their replies, whose values are then never issued (what a
// client that disconnects before sending them gets: no value is lost or
// repeated).

// Limits on one connection's queued transaction, so that MULTI cannot grow
// memory without bound.
const (
	maxQueued      = 100_000
	maxQueuedBytes = 16 << 20
)

// txState is a connection's transaction.
type txState struct {
	active       bool
	dirty        bool // an error while queueing: EXEC aborts
	watchRefused bool // WATCH was refused since the last EXEC, DISCARD or UNWATCH
	queue        []queuedCommand
	bytes        int
}

type queuedCommand struct {
	def  *command
	args [][]byte
}

// issueOnly are the commands whose only effect is the values in their
// reply.
var issueOnly = map[string]bool{"nextid": true, "nextidruns": true, "geneid": true, "uuidv7": true,
	"incr": true, "incrby": true, "nextseg": true, "publicid": true, "publicgeneid": true}

// changesState reports whether a queued command does more than answer:
// EXEC runs it even once the connection has failed.
func changesState(def *command) bool {
	return !issueOnly[def.name] && (slices.Contains(def.flags, "write") || slices.Contains(def.flags, "admin"))
}

// reset ends the transaction and forgets WATCH, as EXEC and DISCARD do.
func (t *txState) reset() {
	*t = txState{}
}

// notQueued are the commands that run at once inside MULTI, as in Redis.
var notQueued = map[string]bool{"exec": true, "discard": true, "multi": true, "watch": true, "quit": true, "reset": true}

// queue adds a command to the transaction and answers QUEUED.
func (s *Server) queue(c *client, conn redcon.Conn, def *command, args [][]byte) {
	size := 0
	for _, a := range args {
		size += len(a)
	}
	if len(c.tx.queue) >= maxQueued || c.tx.bytes+size > maxQueuedBytes {
		c.tx.dirty = true
		s.errorReply(conn, "ERR transaction too large: at most 100000 commands and 16 MiB queued")
		return
	}
	// The arguments point into the connection's read buffer: keep a copy.
	c.tx.queue = append(c.tx.queue, queuedCommand{def: def, args: cloneArgs(args, size)})
	c.tx.bytes += size
	conn.WriteString("QUEUED")
}

// cloneArgs copies args (size bytes in all) into one allocation.
func cloneArgs(args [][]byte, size int) [][]byte {
	buf := make([]byte, 0, size)
	out := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		out[i] = buf[len(buf)-len(a) : len(buf) : len(buf)]
	}
	return out
}

func cmdMulti(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if c.tx.active {
		s.errorReply(conn, "ERR MULTI calls can not be nested")
		return
	}
	c.tx.active = true
	conn.WriteString("OK")
}

func cmdExec(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	tx := c.tx
	switch {
	case !tx.active:
		s.errorReply(conn, "ERR EXEC without MULTI") // a refused WATCH still holds, as a WATCH would in Redis
	case tx.dirty || tx.watchRefused:
		// EXECABORT counts in errorstats and as a failed call of EXEC,
		// as Redis 7.0 counts it.
		msg := "EXECABORT Transaction discarded because of previous errors."
		if !tx.dirty {
			msg = "EXECABORT Transaction discarded because WATCH is not supported by idserver."
		}
		c.tx.reset()
		s.errorReply(conn, msg)
	default:
		// The transaction stays open while it runs, as CLIENT INFO shows
		// in Redis (flags=x); nothing queued can change it.
		conn.WriteArray(len(tx.queue))
		errorsBefore := c.errors
		cn, _ := conn.(*connection)
		for _, q := range tx.queue {
			if cn != nil && cn.err != nil && !changesState(q.def) {
				continue // the client is gone: see above
			}
			s.dispatch(c, conn, q.def, q.args)
		}
		// The queued commands' errors are theirs (each counted its own
		// failed call), not EXEC's: EXEC succeeded.
		c.errors = errorsBefore
		c.tx.reset()
	}
}

func cmdDiscard(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !c.tx.active {
		s.errorReply(conn, "ERR DISCARD without MULTI")
		return
	}
	c.tx.reset()
	conn.WriteString("OK")
}

func cmdWatch(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if c.tx.active {
		s.errorReply(conn, "ERR WATCH inside MULTI is not allowed")
		return
	}
	c.tx.watchRefused = true
	s.errorReply(conn, "ERR WATCH is not supported by idserver: use INCRBY or SET NX, which are atomic; the next EXEC on this connection will fail")
}

func cmdUnwatch(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	c.tx.watchRefused = false
	conn.WriteString("OK")
}

// cmdReset: RESET, as Redis 6.2+: the transaction and a refused WATCH are
// dropped, the protocol goes back to RESP2, the name goes, and with a
// password the connection must AUTH again.
func cmdReset(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	c.tx.reset()
	c.pubsub = subscriptions{}
	c.mu.Lock()
	c.proto, c.name = 2, ""
	c.mu.Unlock()
	if s.cfg.Password != "" {
		c.authed = false
	}
	conn.WriteString("RESET")
}
