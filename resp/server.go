package resp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"idserver/engine"
)

// IDSource issues snowflake and gene IDs; *engine.Generator is one.
type IDSource interface {
	NextIDs(dst []int64, n int) ([]int64, error)
	GeneIDs(dst []int64, gene uint32, n int) ([]int64, error)
	Layout() engine.Layout
	Status() engine.Status
}

// Config sets up a Server.
type Config struct {
	Password   string // --requirepass; empty means no AUTH
	Limits     Limits
	Version    string // idserver's version, for INFO and HELLO
	Commit     string // the commit it was built from, for INFO ("-dirty" suffix: uncommitted changes); "" when unknown
	NodeID     string
	Port       int // for INFO and CONFIG GET port
	Bind       string
	Logger     *slog.Logger
	Now        func() time.Time // TIME; time.Now when nil
	MaxClients int              // connections at once; 10000 when 0
	Segments   SegmentServer    // INCR, INCRBY, NEXTSEG; nil: refused
	Cluster    ClusterNode      // GET, SET, EXISTS, DBSIZE, CLUSTER; nil: refused
	// RequestTimeout bounds a command that waits on the cluster (the
	// cluster's Timing().Request); 10s when zero.
	RequestTimeout time.Duration
	// Ready reports whether the node serves yet. Until it first says true,
	// every command but the connection and introspection ones (QUIT,
	// HELLO, AUTH, SELECT, CLIENT, COMMAND, CONFIG, INFO, TIME, RESET and
	// MULTI/EXEC/DISCARD) is
	// answered "-LOADING ...", as Redis answers while it loads, and INFO
	// says loading:1. Once true it is not asked again. nil: ready at once.
	Ready func() bool
	Debug DebugClock // DEBUG CLOCK (--enable-debug-command); nil: DEBUG refused as Redis does
	// ClientOutputLimit bounds the reply bytes a connection holds: past
	// it they are written before the command goes on (see conn.go).
	// DefaultClientOutputLimit when 0.
	ClientOutputLimit int
	// EmulateCluster answers Redis Cluster's commands (clustermode.go);
	// false answers them as a Redis without cluster support does.
	EmulateCluster bool
	// SentinelMasters are the master names SENTINEL MASTERS lists
	// (sentinel.go); DefaultSentinelMaster when empty. The subcommands that
	// take a name accept any.
	SentinelMasters []string
	// ClientOutputTimeout is how long a write of replies waits for the
	// client to read (at most twice it); a client that takes none in that
	// time is closed. DefaultClientOutputTimeout when 0.
	ClientOutputTimeout time.Duration
}

// RedisVersion is the Redis version whose behaviour the server follows; it
// is what HELLO and INFO report as the version so clients enable RESP3.
const RedisVersion = "7.2.0"

// Server answers RESP on a listener.
type Server struct {
	cfg     Config
	ids     IDSource
	uuids   *engine.UUIDv7 // UUIDV7, on cfg.Now
	started time.Time

	mu      sync.Mutex
	ln      net.Listener
	clients map[*client]struct{}
	closing bool // Close was called: Serve serves nothing more
	// connPeak is the most connections open at once since memory was
	// last given back (connsClosed); releasing says a release is due, and
	// releasedAt is when the last one ran.
	connPeak   int
	releasing  bool
	releasedAt time.Time
	// commands is the context every command's waits derive from: Close
	// cancels it, so that a command waiting on the cluster ends at once.
	commands    context.Context
	endCommands context.CancelFunc
	served      chan struct{} // closed when Serve has returned, its connections ended
	conns       sync.WaitGroup

	// public is the public-ID permutation (PUBLICID), nil until the
	// cluster's key is known.
	public atomic.Pointer[engine.PublicIDs]

	nextClientID atomic.Int64
	stats        stats
	clockBehind  atomic.Bool             // answering CLOCKBACK; logged on each change
	issueFailAt  atomic.Int64            // unix ns of the last "issue failed" log: one a second
	ready        atomic.Bool             // Config.Ready said true once
	cmdStats     []commandStats          // by command index
	errorsByCode []atomic.Int64          // by ErrorCodes index
	instant      instant                 // INFO's instantaneous rates and memory peak
	authLog      authFailureLog          // the rate-limited log of AUTH failures
	probes       probes                  // which members answer, for CLUSTER SLOTS and SENTINEL (clustermode.go)
	slotMap      atomic.Pointer[slotMap] // the last map, for MOVED (clustermode.go)
	slotMapMu    sync.Mutex              // held while the map is made again
}

// stats are the counters INFO reports.
type stats struct {
	connections  atomic.Int64 // accepted, ever
	commands     atomic.Int64
	rejected     atomic.Int64 // connections refused at --maxclients
	slowClients  atomic.Int64 // connections closed for not reading their replies
	errorReplies atomic.Int64 // error replies written (frames refused not included)
	// keyspaceHits and keyspaceMisses count tags looked up by GET,
	// EXISTS and TYPE that were found or not, as Redis counts its reads.
	keyspaceHits, keyspaceMisses atomic.Int64
	netInput, netOutput          atomic.Int64 // bytes read from and written to clients
	reads                        atomic.Int64 // read system calls on client connections (total_reads_processed)
	authFailures                 atomic.Int64 // AUTH and HELLO AUTH refused (acl_access_denied_auth)
}

// New makes a server; Serve starts it.
func New(cfg Config, ids IDSource) *Server {
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxClients == 0 {
		cfg.MaxClients = 10000
	}
	if cfg.ClientOutputLimit == 0 {
		cfg.ClientOutputLimit = DefaultClientOutputLimit
	}
	if cfg.ClientOutputTimeout == 0 {
		cfg.ClientOutputTimeout = DefaultClientOutputTimeout
	}
	loadCommandTable()
	commands, endCommands := context.WithCancel(context.Background())
	return &Server{commands: commands, endCommands: endCommands, cfg: cfg, ids: ids, uuids: engine.NewUUIDv7(cfg.Now, rand.Reader), started: time.Now(), clients: map[*client]struct{}{},
		cmdStats: make([]commandStats, len(commandTable)), errorsByCode: make([]atomic.Int64, len(ErrorCodes))}
}

// client is one connection's state. Its own goroutine (serveConn) reads
// and writes it; CLIENT LIST on another connection reads what it shows
// under mu (proto, name, libName, libVer, written under mu) and through
// lastCmd, so that it never reads a string being written.
type client struct {
	id      int64
	conn    *connection
	addr    string
	created time.Time
	authed  bool // also lifts the pre-AUTH frame limits

	mu      sync.Mutex
	proto   int // 2 or 3
	name    string
	libName string
	libVer  string

	lastCmd atomic.Pointer[string] // the command's name, as CLIENT LIST shows it
	cmd     int                    // index of the command being answered
	errors  int64                  // error replies written on this connection
	ids     []int64                // reused reply buffer
	tag     string                 // the last tag a run of INCRs named, kept so that the next run allocates none
	tx      txState                // MULTI ... EXEC
	pubsub  subscriptions          // SUBSCRIBE and PSUBSCRIBE (pubsub.go)
	// authFailures counts the AUTHs refused on this connection since it
	// last authenticated: past authFreeFailures each one waits (authDelay).
	authFailures int
}

// Serve answers connections from ln until Close. It returns nil after
// Close, once every connection's goroutine has ended.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	served := make(chan struct{})
	s.served = served
	s.mu.Unlock()
	stopSampling, sampled := make(chan struct{}), make(chan struct{})
	defer func() {
		close(stopSampling)
		s.closeClients()
		s.conns.Wait()
		<-sampled
		s.authLog.flush(s.cfg.Logger)
		close(served)
	}()
	go func() {
		defer close(sampled)
		s.sampleLoop(stopSampling)
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors, or the like: wait rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.cfg.Logger.Warn("accept failed", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if c := s.accept(nc); c != nil {
			s.conns.Add(1)
			go func() {
				defer s.conns.Done()
				s.serveConn(c, c.conn)
			}()
		}
	}
}

// Close stops accepting, ends every connection, cancels the waits of the
// commands in flight and waits until each connection's goroutine has
// returned: no command runs once it returns. A Serve called after Close
// serves nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing = true
	ln, served := s.ln, s.served
	s.mu.Unlock()
	if ln == nil {
		s.endCommands()
		return nil
	}
	// The connections end before the commands' waits are cancelled, so
	// that a cancelled command's error reaches no client: its connection
	// ends without a reply, as at any shutdown.
	err := ln.Close()
	s.closeClients()
	s.endCommands()
	<-served
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed before
	}
	return err
}

// closeClients ends every connection once Serve stops.
func (s *Server) closeClients() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.clients {
		c.conn.kill()
	}
}

// accept registers a new connection, or refuses it at --maxclients.
func (s *Server) accept(nc net.Conn) *client {
	cn := &connection{nc: nc, addr: nc.RemoteAddr().String(), limit: s.cfg.ClientOutputLimit, timeout: s.cfg.ClientOutputTimeout,
		rc: rawConnOf(nc), gone: make(chan struct{})}
	c := &client{
		id:      s.nextClientID.Add(1),
		conn:    cn,
		addr:    cn.addr,
		created: time.Now(),
		proto:   2,
		authed:  s.cfg.Password == "",
	}
	cn.SetContext(c)
	s.stats.connections.Add(1)
	s.mu.Lock()
	closing := s.closing
	full := len(s.clients) >= s.cfg.MaxClients
	if !full && !closing {
		s.clients[c] = struct{}{}
		s.connPeak = max(s.connPeak, len(s.clients))
	}
	s.mu.Unlock()
	if closing { // accepted as Close began: it would miss Close's ending
		nc.Close()
		return nil
	}
	if full {
		if n := s.stats.rejected.Add(1); n == 1 || n%1000 == 0 {
			s.cfg.Logger.Warn("refusing connections: --maxclients reached", "maxclients", s.cfg.MaxClients, "refused_so_far", n)
		}
		cn.WriteError("ERR max number of clients reached") // Redis's words
		cn.Close()
		return nil
	}
	return c
}

// After many connections close, the memory they held (their goroutines'
// stacks, their structs) is free in the Go heap but still the process's:
// the runtime gives free memory back to the OS only after a GC, and slowly.
// Once the open connections fall to half their peak, and by at least
// releaseConns, the server runs a GC and gives the free memory back
// (debug.FreeOSMemory): releaseDelay later, so that the rest of a burst of
// closes is in it too, and at most once per releaseInterval. A burst of
// clients that came and went so leaves little behind, as Redis frees a
// client's memory when it goes.
const (
	releaseConns    = 1000
	releaseDelay    = time.Second
	releaseInterval = 10 * time.Second
)

// connsClosed is told, under s.mu, that a connection ended.
func (s *Server) connsClosed() {
	open := len(s.clients)
	if s.releasing || s.connPeak-open < releaseConns || open > s.connPeak/2 {
		return
	}
	s.releasing = true
	time.AfterFunc(max(releaseDelay, releaseInterval-time.Since(s.releasedAt)), s.releaseMemory)
}

// releaseMemory gives the free memory back to the OS (connsClosed).
func (s *Server) releaseMemory() {
	debug.FreeOSMemory()
	s.mu.Lock()
	s.connPeak, s.releasing, s.releasedAt = len(s.clients), false, time.Now()
	s.mu.Unlock()
}

// connectedClients counts open connections.
func (s *Server) connectedClients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// lookup finds a command by its name in any case; nil when unknown. The
// table is a map; this index in front of it costs no hashing of the name:
// a few candidates by length and first and last letters, compared in
// place.
func lookup(name []byte) *command {
	if len(name) == 0 {
		return nil
	}
	for _, def := range commandIndex()[nameSlot(name)] {
		if len(def.name) == len(name) && equalFoldASCII(name, def.name) {
			return def
		}
	}
	return nil
}

// nameSlot is a command name's slot in the index, the same for any case.
func nameSlot(name []byte) int {
	return (len(name)*7 + int(name[0]|0x20)*3 + int(name[len(name)-1]|0x20)) & 63
}

// equalFoldASCII reports whether b is lower, ignoring the case of b's
// ASCII letters (lower is lower case).
func equalFoldASCII(b []byte, lower string) bool {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// commandIndex is commandTable by nameSlot, built once, on the first
// lookup (after NewServer has loaded the table). It is a pointer: the
// array, returned by value, was copied (1.5 KB) on every lookup.
var commandIndex = sync.OnceValue(func() *[64][]*command {
	var index [64][]*command
	for _, name := range sortedCommandNames() {
		slot := nameSlot([]byte(name))
		index[slot] = append(index[slot], commandTable[name])
	}
	return &index
})

// handle answers the command in frame, whose arguments are args. rest is
// what follows the frame in the read buffer: a run of the same ID command
// there is answered with it (see run.go), and handle returns how many bytes
// of rest that took.
func (s *Server) handle(c *client, cn *connection, p *frameParser, args [][]byte, frame, rest []byte) int {
	def := lookup(args[0])
	var subErr string // an unknown subcommand or its arity: refused as Redis refuses an unknown command
	if def != nil && def.subs != nil {
		subErr = def.subError(args)
	}
	switch {
	case def == nil:
		s.refuse(c, cn, unknownCommand(args))
	case !def.arityOK(len(args)) && def.name == "exec":
		// Redis discards the transaction, inside MULTI or not.
		c.tx.reset()
		s.cmdStats[def.index].rejected.Add(1)
		s.errorReply(cn, "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command")
	case !def.arityOK(len(args)): // before NOAUTH, as Redis checks
		s.reject(c, cn, def, wrongArity(def.name))
	case subErr != "":
		s.refuse(c, cn, subErr)
	case !c.authed && !def.beforeAuth:
		s.reject(c, cn, def, "NOAUTH Authentication required.")
	case !def.whileLoading && !s.isReady():
		s.reject(c, cn, def, errLoading)
	case c.pubsub.count() > 0 && c.proto == 2 && !allowedSubscribed[def.name]:
		s.reject(c, cn, def, errSubscribedContext(def.name))
	case s.cfg.EmulateCluster && def.keys[0] > 0 && s.moved(c, cn, def, args):
	case c.tx.active && !notQueued[def.name]:
		s.queue(c, cn, def, args)
	case def.run != nil && len(args) == def.runArgs:
		return s.dispatchRun(c, cn, p, def, args, frame, rest)
	default:
		s.dispatch(c, cn, def, args)
	}
	return 0
}

// setLastCmd records the command being answered for CLIENT LIST; most
// commands repeat the previous one, which costs no store.
func (c *client) setLastCmd(name *string) {
	if c.lastCmd.Load() != name {
		c.lastCmd.Store(name)
	}
}

// isReady reports whether the node serves every command (Config.Ready).
func (s *Server) isReady() bool {
	if s.ready.Load() {
		return true
	}
	if s.cfg.Ready == nil || s.cfg.Ready() {
		s.ready.Store(true)
		return true
	}
	return false
}

// refuse answers a command that cannot run; inside MULTI it also makes
// EXEC abort, as in Redis.
func (s *Server) refuse(c *client, conn redcon.Conn, msg string) {
	if c.tx.active {
		c.tx.dirty = true
	}
	s.errorReply(conn, msg)
}

// reject is refuse for a known command, counted in its rejected_calls.
func (s *Server) reject(c *client, conn redcon.Conn, def *command, msg string) {
	s.cmdStats[def.index].rejected.Add(1)
	s.refuse(c, conn, msg)
}

// errLoading answers every command but the connection ones until the node
// can issue (Config.Ready), as Redis answers while it loads.
const errLoading = "LOADING idserver is starting: waiting for its worker ID and a Raft leader"

// dispatch runs a command and counts it, at once or inside EXEC.
func (s *Server) dispatch(c *client, conn redcon.Conn, def *command, args [][]byte) {
	s.stats.commands.Add(1)
	c.cmd = def.index
	if def.subs != nil && len(args) > 1 {
		name := def.name + "|" + strings.ToLower(string(args[1]))
		c.lastCmd.Store(&name)
	} else {
		c.setLastCmd(&def.name)
	}
	errorsBefore := c.errors
	st := &s.cmdStats[def.index]
	if def.subs != nil && len(args) == 2 && strings.EqualFold(string(args[1]), "help") {
		def = helpCommand
	}
	if st.calls.Add(1)%latencySample == 0 {
		start := time.Now()
		def.handler(s, c, conn, args)
		st.observe(time.Since(start))
	} else {
		def.handler(s, c, conn, args)
	}
	if c.errors != errorsBefore {
		st.errors.Add(1)
	}
}

func (s *Server) errorReply(conn redcon.Conn, msg string) {
	s.stats.errorReplies.Add(1)
	s.countError(msg)
	if c, ok := conn.Context().(*client); ok {
		c.errors++
	}
	conn.WriteError(msg)
}

// engineError puts an engine error on the wire with its code.
func (s *Server) engineError(conn redcon.Conn, err error) {
	var cb *engine.ClockBackError
	switch {
	case errors.As(err, &cb):
		if s.clockBehind.CompareAndSwap(false, true) {
			s.cfg.Logger.Warn("clock behind issued IDs: answering CLOCKBACK", "behind_ms", cb.BehindMS, "reason", cb.Reason)
		}
		s.errorReply(conn, "CLOCKBACK "+cb.Error())
	case errors.Is(err, engine.ErrClosed):
		s.errorReply(conn, "TRYAGAIN server is shutting down")
	case errors.Is(err, engine.ErrNoLease):
		s.errorReply(conn, "TRYAGAIN "+err.Error())
	default:
		// A full disk fails every request for as long as it lasts: one
		// line a second says so.
		if now, last := time.Now().UnixNano(), s.issueFailAt.Load(); now-last >= int64(time.Second) && s.issueFailAt.CompareAndSwap(last, now) {
			s.cfg.Logger.Error("issue failed (logged once a second)", "err", err)
		}
		s.errorReply(conn, "ERR "+err.Error())
	}
}

// checkPassword compares in constant time.
func (s *Server) checkPassword(user, pass []byte) bool {
	if user != nil && string(user) != "default" {
		return false
	}
	return subtle.ConstantTimeCompare(pass, []byte(s.cfg.Password)) == 1
}

// setAuthed marks the client authenticated, lifting the pre-auth limits.
func (c *client) setAuthed() {
	c.authed = true
	c.authFailures = 0
}

// unknownCommand is Redis 7's message, args quoted and cut as Redis does.
func unknownCommand(args [][]byte) string {
	msg := "ERR unknown command '" + clip(args[0], 128) + "', with args beginning with: "
	for _, a := range args[1:] {
		if len(msg) > 256 {
			break
		}
		msg += "'" + clip(a, 128) + "' "
	}
	return msg
}

func clip(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

func wrongArity(name string) string {
	return "ERR wrong number of arguments for '" + name + "' command"
}

// parseInt64 accepts what Redis's string2ll accepts: an optional '-', then
// digits with no leading zero, no '+', no spaces, within int64.
func parseInt64(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		next := n*10 + uint64(c-'0')
		if next/10 != n || next > 1<<63 {
			return 0, false
		}
		n = next
	}
	if neg {
		if n == 0 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// Reply writers that differ between RESP2 and RESP3.

func writeMap(conn redcon.Conn, c *client, pairs int) {
	if c.proto == 3 {
		conn.WriteRaw(strconv.AppendInt([]byte{'%'}, int64(pairs), 10))
		conn.WriteRaw([]byte("\r\n"))
		return
	}
	conn.WriteArray(pairs * 2)
}

func writeNull(conn redcon.Conn, c *client) {
	if c.proto == 3 {
		conn.WriteRaw([]byte("_\r\n"))
		return
	}
	conn.WriteNull()
}

// errNotInteger is Redis's reply to an argument that is not an int64.
const errNotInteger = "ERR value is not an integer or out of range"
