package resp

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/redcon"
)

// command is one row of the command table.
type command struct {
	name       string // lower case, as Redis names it in errors
	index      int    // position in the server's per-command counters
	arity      int    // Redis convention: n exact, -n at least n (name included)
	beforeAuth bool   // answered before AUTH
	// whileLoading: answered before the node is ready (Redis's "loading"
	// flag). PING and ECHO have not, as in Redis 7: a readiness probe that
	// sends PING sees -LOADING until the node can issue.
	whileLoading bool
	flags        []string
	keys         [3]int // first key, last key (-1: the last argument), step; zero: no key
	// subs are the subcommands and their arities (CLIENT, COMMAND, CONFIG,
	// CLUSTER): named "client|list" in CLIENT LIST, checked by subError.
	subs    map[string]int
	summary string
	handler func(s *Server, c *client, conn redcon.Conn, args [][]byte)
	// run answers a run of the command with runArgs arguments (name
	// included) at once: see run.go. nil: one at a time.
	run     runFunc
	runArgs int
	// newTags: a run of the command on a tag with no buffer first starts
	// the allocations of the new tags of the same command after it in the
	// read buffer (prefetchNewTags).
	newTags bool
}

func (d *command) arityOK(n int) bool { return arityOK(d.arity, n) }

func arityOK(arity, n int) bool {
	if arity < 0 {
		return n >= -arity
	}
	return n == arity
}

// subError is Redis's error for an unknown subcommand of d or a wrong
// number of arguments to it, "" when args are fine. Inside MULTI it is
// checked while queueing, so that EXEC aborts, as in Redis.
func (d *command) subError(args [][]byte) string {
	if d.subs == nil || len(args) < 2 {
		return ""
	}
	sub := strings.ToLower(string(args[1]))
	arity, known := d.subs[sub]
	switch {
	case !known:
		return "ERR unknown subcommand '" + clip(args[1], 128) + "'. Try " + strings.ToUpper(d.name) + " HELP."
	case !arityOK(arity, len(args)):
		return wrongArity(d.name + "|" + sub)
	}
	return ""
}

// MaxCount is the largest count NEXTID and GENEID take.
const MaxCount = 10000

// MaxKeyLen is the longest buyer (and tag) in bytes.
const MaxKeyLen = 256

// commandTable is every command the server answers, by lower-case name.
// Each topic file lists its own commands; loadCommandTable puts them
// together, once, when the first Server is made. (It is not a var with an
// initialiser because the handlers of COMMAND, EXEC and INFO read the
// table, which Go refuses as an initialisation cycle.)
var commandTable map[string]*command

var loadCommandsOnce sync.Once

// loadCommandTable builds commandTable from the topic files' lists and
// numbers the commands in name order for the per-command counters.
func loadCommandTable() {
	loadCommandsOnce.Do(func() {
		commandTable = buildCommandTable(idCommands(), connCommands(), tagCommands(), msetCommands(), uuidCommands(), publicCommands(), debugCommands(),
			clusterModeCommands(), sentinelCommands(), pubsubCommands())
		for i, name := range sortedCommandNames() {
			commandTable[name].index = i
		}
	})
}

// buildCommandTable indexes the lists by name; a name listed twice is a
// programming error.
func buildCommandTable(lists ...[]*command) map[string]*command {
	t := map[string]*command{}
	for _, list := range lists {
		for _, d := range list {
			if t[d.name] != nil {
				panic("resp: command " + d.name + " listed twice")
			}
			t[d.name] = d
		}
	}
	return t
}

// idCommands issue and take apart snowflake and gene IDs.
func idCommands() []*command {
	return []*command{
		{name: "nextid", arity: -1, flags: []string{"write", "fast"}, summary: "Issue a snowflake ID, or count of them", handler: cmdNextID, run: runNextID, runArgs: 1},
		{name: "nextidruns", arity: 2, flags: []string{"write", "fast"}, summary: "Issue count snowflake IDs as runs [first, last] of consecutive IDs", handler: cmdNextIDRuns},
		{name: "geneid", arity: -2, flags: []string{"write", "fast"}, summary: "Issue an ID carrying the buyer's shard gene", handler: cmdGeneID, run: runGeneID, runArgs: 2},
		{name: "geneidruns", arity: 3, flags: []string{"write", "fast"}, summary: "Issue count IDs carrying the buyer's shard gene as runs [first, last] of IDs 2^gene-bits apart", handler: cmdGeneIDRuns},
		{name: "geneof", arity: 2, flags: []string{"readonly", "fast"}, summary: "The shard gene of a buyer", handler: cmdGeneOf},
		{name: "decode", arity: -2, flags: []string{"readonly", "fast"}, summary: "Take an ID apart: time, worker, sequence, gene; a UUIDv7's time; with PUBLICID or PUBLICGENEID, a public form's ID and its parts", handler: cmdDecode},
	}
}

// connCommands are the connection, transaction and introspection commands
// a Redis client expects.
func connCommands() []*command {
	return []*command{
		{name: "ping", arity: -1, flags: []string{"fast"}, summary: "Ping the server", handler: cmdPing},
		{name: "echo", arity: 2, flags: []string{"fast"}, summary: "Echo the argument", handler: cmdEcho},
		{name: "quit", arity: -1, whileLoading: true, beforeAuth: true, flags: []string{"fast"}, summary: "Close the connection", handler: cmdQuit},
		{name: "hello", arity: -1, whileLoading: true, beforeAuth: true, flags: []string{"fast"}, summary: "Handshake: protocol version, AUTH, SETNAME", handler: cmdHello},
		{name: "auth", arity: -2, whileLoading: true, beforeAuth: true, flags: []string{"fast"}, summary: "Authenticate the connection", handler: cmdAuth},
		{name: "select", arity: 2, whileLoading: true, flags: []string{"fast"}, summary: "Select database 0 (the only one)", handler: cmdSelect},
		{name: "client", arity: -2, subs: map[string]int{"help": 2, "id": 2, "getname": 2, "setname": 3, "info": 2, "list": -2, "setinfo": 4, "no-evict": 3, "no-touch": 3, "tracking": -3}, whileLoading: true, flags: []string{"slow"}, summary: "Connection commands", handler: cmdClient},
		{name: "command", arity: -1, subs: map[string]int{"help": 2, "count": 2, "info": -2, "docs": -2}, whileLoading: true, flags: []string{"slow"}, summary: "Describe the commands", handler: cmdCommand},
		{name: "config", arity: -2, subs: map[string]int{"help": 2, "get": -3, "set": -4, "resetstat": 2}, whileLoading: true, flags: []string{"slow"}, summary: "Read configuration parameters", handler: cmdConfig},
		{name: "info", arity: -1, whileLoading: true, flags: []string{"slow"}, summary: "Server information and statistics", handler: cmdInfo},
		{name: "reset", arity: 1, beforeAuth: true, whileLoading: true, flags: []string{"fast"}, summary: "Reset the connection: transaction, protocol, name, AUTH", handler: cmdReset},
		{name: "multi", arity: 1, whileLoading: true, flags: []string{"fast"}, summary: "Start a transaction", handler: cmdMulti},
		{name: "exec", arity: 1, whileLoading: true, flags: []string{"slow"}, summary: "Run the queued commands", handler: cmdExec},
		{name: "discard", arity: 1, whileLoading: true, flags: []string{"fast"}, summary: "Drop the queued commands", handler: cmdDiscard},
		{name: "watch", arity: -2, keys: allKeys, whileLoading: true, flags: []string{"fast"}, summary: "Refused: use INCRBY or SET NX", handler: cmdWatch},
		{name: "unwatch", arity: 1, whileLoading: true, flags: []string{"fast"}, summary: "Forget a refused WATCH", handler: cmdUnwatch},
		{name: "time", arity: 1, whileLoading: true, flags: []string{"fast"}, summary: "The server time", handler: cmdTime},
	}
}

// parseCount reads a NEXTID/GENEID count; ok false means an error was written.
func (s *Server) parseCount(conn redcon.Conn, arg []byte) (int, bool) {
	n, ok := parseInt64(arg)
	if !ok {
		s.errorReply(conn, errNotInteger)
		return 0, false
	}
	if n < 1 || n > MaxCount {
		s.errorReply(conn, "ERR count is out of range, must be between 1 and "+strconv.Itoa(MaxCount))
		return 0, false
	}
	return int(n), true
}

// optionalCount reads the [count] of "name [count]" (1 when absent); ok
// false means an error was written.
func (s *Server) optionalCount(conn redcon.Conn, name string, args [][]byte) (int, bool) {
	switch len(args) {
	case 1:
		return 1, true
	case 2:
		return s.parseCount(conn, args[1])
	}
	s.errorReply(conn, wrongArity(name))
	return 0, false
}

// buyerAndCount parses GENEID's arguments, buyer [count]: the buyer's
// gene and the count (1 when absent); ok false means an error was written.
func (s *Server) buyerAndCount(conn redcon.Conn, name string, args [][]byte) (gene uint32, n int, ok bool) {
	if len(args) > 3 {
		s.errorReply(conn, wrongArity(name))
		return 0, 0, false
	}
	if !s.validKey(conn, "buyer", args[1]) {
		return 0, 0, false
	}
	n = 1
	if len(args) == 3 {
		if n, ok = s.parseCount(conn, args[2]); !ok {
			return 0, 0, false
		}
	}
	return s.ids.Layout().Gene(args[1]), n, true
}

// validKey checks a buyer's length; ok false means an error was written.
func (s *Server) validKey(conn redcon.Conn, what string, key []byte) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		s.errorReply(conn, fmt.Sprintf("ERR %s must be 1 to %d bytes", what, MaxKeyLen))
		return false
	}
	return true
}

// countIssued counts n IDs issued by the command, and logs once that the
// clock caught up after CLOCKBACK answers.
func (s *Server) countIssued(c *client, n int) {
	s.cmdStats[c.cmd].issued.Add(int64(n))
	if s.clockBehind.Load() && s.clockBehind.CompareAndSwap(true, false) {
		s.cfg.Logger.Info("clock caught up: issuing IDs again")
	}
}

// writeIDs answers one integer, or an array when a count was given.
func (s *Server) writeIDs(c *client, conn redcon.Conn, ids []int64, asArray bool) {
	s.countIssued(c, len(ids))
	if !asArray {
		conn.WriteInt64(ids[0])
		return
	}
	conn.WriteArray(len(ids))
	for _, id := range ids {
		conn.WriteInt64(id)
	}
}

func cmdNextID(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	n, ok := s.optionalCount(conn, "nextid", args)
	if !ok {
		return
	}
	ids, err := s.ids.NextIDs(c.ids[:0], n)
	c.ids = ids[:0]
	if err != nil {
		s.engineError(conn, err)
		return
	}
	s.writeIDs(c, conn, ids, len(args) == 2)
}

func cmdGeneID(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	gene, n, ok := s.buyerAndCount(conn, "geneid", args)
	if !ok {
		return
	}
	ids, err := s.ids.GeneIDs(c.ids[:0], gene, n)
	c.ids = ids[:0]
	if err != nil {
		s.engineError(conn, err)
		return
	}
	s.writeIDs(c, conn, ids, len(args) == 3)
}

func cmdGeneOf(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.validKey(conn, "buyer", args[1]) {
		return
	}
	conn.WriteInt64(int64(s.ids.Layout().Gene(args[1])))
}

func cmdDecode(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if len(args) > 2 {
		s.decodePublic(c, conn, args)
		return
	}
	if decodeUUIDv7(c, conn, args[1]) {
		return
	}
	id, ok := parseInt64(args[1])
	if !ok {
		s.errorReply(conn, "ERR invalid id")
		return
	}
	s.writeDecoded(c, conn, id, false)
}

// writeDecoded answers DECODE of id; withID puts the ID first, for DECODE
// of a public form.
func (s *Server) writeDecoded(c *client, conn redcon.Conn, id int64, withID bool) {
	p, err := s.ids.Layout().Decode(id)
	if err != nil {
		s.errorReply(conn, "ERR invalid id")
		return
	}
	writeMap(conn, c, 5+b2i(withID))
	if withID {
		conn.WriteBulkString("id")
		conn.WriteInt64(id)
	}
	conn.WriteBulkString("time_ms")
	conn.WriteInt64(p.UnixMS)
	conn.WriteBulkString("time")
	conn.WriteBulkString(p.Time.Format("2006-01-02T15:04:05.000Z07:00"))
	conn.WriteBulkString("worker")
	conn.WriteInt64(p.Worker)
	conn.WriteBulkString("sequence")
	conn.WriteInt64(p.Sequence)
	conn.WriteBulkString("gene")
	conn.WriteInt64(p.Gene)
}

func cmdPing(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if c.pubsub.count() > 0 && c.proto == 2 { // Redis's reply in the subscribed context
		conn.WriteArray(2)
		conn.WriteBulkString("pong")
		if len(args) > 1 {
			conn.WriteBulk(args[1])
		} else {
			conn.WriteBulkString("")
		}
		return
	}
	switch len(args) {
	case 1:
		conn.WriteString("PONG")
	case 2:
		conn.WriteBulk(args[1])
	default:
		s.errorReply(conn, wrongArity("ping"))
	}
}

func cmdEcho(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	conn.WriteBulk(args[1])
}

// cmdQuit answers OK and closes; the serve loop runs nothing after Close.
func cmdQuit(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	conn.WriteString("OK")
	conn.Close()
}

func cmdSelect(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	n, ok := parseInt64(args[1])
	switch {
	case !ok:
		s.errorReply(conn, errNotInteger)
	case n != 0:
		s.errorReply(conn, "ERR DB index is out of range")
	default:
		conn.WriteString("OK")
	}
}

func cmdAuth(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	var user, pass []byte
	switch len(args) {
	case 2:
		pass = args[1]
	case 3:
		user, pass = args[1], args[2]
	default:
		s.errorReply(conn, "ERR syntax error")
		return
	}
	if s.cfg.Password == "" {
		if user == nil {
			s.errorReply(conn, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
			return
		}
		if string(user) == "default" {
			conn.WriteString("OK")
			return
		}
	}
	if s.cfg.Password == "" || !s.checkPassword(user, pass) {
		s.authFailed(c, conn)
		return
	}
	c.setAuthed()
	conn.WriteString("OK")
}

// cmdHello: HELLO [protover [AUTH username password] [SETNAME clientname]].
func cmdHello(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	proto := c.proto
	if len(args) > 1 {
		v, ok := parseInt64(args[1])
		if !ok {
			s.errorReply(conn, "ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			s.errorReply(conn, "NOPROTO unsupported protocol version")
			return
		}
		proto = int(v)
	}
	var name []byte
	authed := c.authed
	for i := 2; i < len(args); i++ {
		opt := strings.ToLower(string(args[i]))
		switch {
		case opt == "auth" && i+2 < len(args):
			user, pass := args[i+1], args[i+2]
			i += 2
			if s.cfg.Password == "" && string(user) == "default" {
				authed = true
				continue
			}
			if s.cfg.Password == "" || !s.checkPassword(user, pass) {
				s.authFailed(c, conn)
				return
			}
			authed = true
		case opt == "setname" && i+1 < len(args):
			name = args[i+1]
			i++
			if !validClientName(name) {
				s.errorReply(conn, "ERR Client names cannot contain spaces, newlines or special characters.")
				return
			}
		default:
			s.errorReply(conn, "ERR Syntax error in HELLO option '"+clip(args[i], 128)+"'")
			return
		}
	}
	if !authed {
		s.errorReply(conn, "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if !c.authed {
		c.setAuthed()
	}
	c.mu.Lock()
	if name != nil {
		c.name = string(name)
	}
	c.proto = proto
	c.mu.Unlock()
	writeMap(conn, c, 8)
	conn.WriteBulkString("server")
	conn.WriteBulkString("idserver")
	conn.WriteBulkString("version")
	conn.WriteBulkString(RedisVersion)
	conn.WriteBulkString("proto")
	conn.WriteInt(proto)
	conn.WriteBulkString("id")
	conn.WriteInt64(c.id)
	conn.WriteBulkString("mode")
	conn.WriteBulkString(s.redisMode())
	conn.WriteBulkString("role")
	conn.WriteBulkString("master")
	conn.WriteBulkString("modules")
	conn.WriteArray(0)
	conn.WriteBulkString("idserver_version")
	conn.WriteBulkString(s.cfg.Version)
}

func validClientName(name []byte) bool {
	for _, b := range name {
		if b < '!' || b > '~' {
			return false
		}
	}
	return true
}

func cmdClient(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	switch sub := strings.ToLower(string(args[1])); sub {
	case "tracking":
		// Client-side caching is refused, not served: what a client would
		// cache (GET tag) changes with every value any node hands out, so
		// every read would be followed by an invalidation, and the ID
		// commands are never cacheable. rueidis enables it by default.
		s.errorReply(conn, "ERR CLIENT TRACKING (client-side caching) is not supported by idserver: tag high-waters change with "+
			"every value issued and IDs are never cached. With rueidis set rueidis.ClientOption{DisableCache: true}")
	case "id":
		conn.WriteInt64(c.id)
	case "getname":
		if c.name == "" {
			writeNull(conn, c)
			return
		}
		conn.WriteBulkString(c.name)
	case "setname":
		if !validClientName(args[2]) {
			s.errorReply(conn, "ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.mu.Lock()
		c.name = string(args[2])
		c.mu.Unlock()
		conn.WriteString("OK")
	case "setinfo":
		var field *string
		switch attr := strings.ToLower(string(args[2])); attr {
		case "lib-name":
			field = &c.libName
		case "lib-ver":
			field = &c.libVer
		default:
			s.errorReply(conn, "ERR Unrecognized option '"+clip(args[2], 128)+"'")
			return
		}
		if !validClientName(args[3]) {
			s.errorReply(conn, "ERR "+strings.ToLower(string(args[2]))+" cannot contain spaces, newlines or special characters.")
			return
		}
		c.mu.Lock()
		*field = string(args[3])
		c.mu.Unlock()
		conn.WriteString("OK")
	case "info":
		conn.WriteBulkString(s.clientLine(c, true) + "\n")
	case "list":
		s.clientList(c, conn, args[2:])
	case "no-evict", "no-touch":
		if on := strings.ToLower(string(args[2])); on != "on" && on != "off" {
			s.errorReply(conn, "ERR syntax error")
			return
		}
		conn.WriteString("OK")
	}
}

// clientList: CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...],
// in connection order, as Redis 7 filters it.
func (s *Server) clientList(c *client, conn redcon.Conn, args [][]byte) {
	var ids map[int64]bool
	switch {
	case len(args) == 0:
	case len(args) == 2 && strings.EqualFold(string(args[0]), "type"):
		switch strings.ToLower(string(args[1])) {
		case "normal":
		case "master", "replica", "slave", "pubsub":
			conn.WriteBulkString("") // none of idserver's clients is one
			return
		default:
			s.errorReply(conn, "ERR Unknown client type '"+clip(args[1], 128)+"'")
			return
		}
	case len(args) >= 2 && strings.EqualFold(string(args[0]), "id"):
		ids = map[int64]bool{}
		for _, a := range args[1:] {
			id, ok := parseInt64(a)
			if !ok || id < 1 {
				s.errorReply(conn, "ERR Invalid client ID")
				return
			}
			ids[id] = true
		}
	default:
		s.errorReply(conn, "ERR syntax error")
		return
	}
	s.mu.Lock()
	clients := make([]*client, 0, len(s.clients))
	for other := range s.clients {
		if ids == nil || ids[other.id] {
			clients = append(clients, other)
		}
	}
	s.mu.Unlock()
	sort.Slice(clients, func(i, j int) bool { return clients[i].id < clients[j].id })
	var b strings.Builder
	for _, other := range clients {
		b.WriteString(s.clientLine(other, other == c) + "\n")
	}
	conn.WriteBulkString(b.String())
}

// clientLine is one line of CLIENT INFO / CLIENT LIST, with Redis 7.2's
// fields. self: the line is the asking connection's, whose transaction
// state can be read (another connection's is its own goroutine's).
func (s *Server) clientLine(c *client, self bool) string {
	flags, multi := "N", -1
	if self && c.tx.active {
		flags, multi = "x", len(c.tx.queue)
	}
	cmd := "NULL"
	if p := c.lastCmd.Load(); p != nil {
		cmd = *p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=0 name=%s age=%d idle=0 flags=%s db=0 sub=0 psub=0 ssub=0 multi=%d qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=default redir=-1 resp=%d lib-name=%s lib-ver=%s",
		c.id, c.addr, c.conn.LocalAddr(), c.name, int(time.Since(c.created).Seconds()), flags, multi, cmd, c.proto, c.libName, c.libVer)
}

// cmdCommand: COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS [name...].
func cmdCommand(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if len(args) == 1 {
		names := sortedCommandNames()
		conn.WriteArray(len(names))
		for _, n := range names {
			writeCommandInfo(conn, commandTable[n])
		}
		return
	}
	switch strings.ToLower(string(args[1])) {
	case "count":
		conn.WriteInt(len(commandTable))
	case "info":
		names := args[2:]
		if len(names) == 0 { // every command, as Redis 7.0
			for _, n := range sortedCommandNames() {
				names = append(names, []byte(n))
			}
		}
		conn.WriteArray(len(names))
		for _, a := range names {
			if d := commandTable[strings.ToLower(string(a))]; d != nil {
				writeCommandInfo(conn, d)
			} else {
				writeNull(conn, c)
			}
		}
	case "docs":
		names := sortedCommandNames()
		if len(args) > 2 {
			names = names[:0]
			for _, a := range args[2:] {
				if n := strings.ToLower(string(a)); commandTable[n] != nil {
					names = append(names, n)
				}
			}
		}
		writeMap(conn, c, len(names))
		for _, n := range names {
			d := commandTable[n]
			conn.WriteBulkString(n)
			writeMap(conn, c, 4)
			conn.WriteBulkString("summary")
			conn.WriteBulkString(d.summary)
			conn.WriteBulkString("since")
			conn.WriteBulkString("1.0.0")
			conn.WriteBulkString("group")
			conn.WriteBulkString("generic")
			conn.WriteBulkString("complexity")
			conn.WriteBulkString("O(1)")
		}
	}
}

func sortedCommandNames() []string {
	names := make([]string, 0, len(commandTable))
	for n := range commandTable {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// writeCommandInfo writes Redis 7's ten-field command description.
func writeCommandInfo(conn redcon.Conn, d *command) {
	conn.WriteArray(10)
	conn.WriteBulkString(d.name)
	conn.WriteInt(d.arity)
	conn.WriteArray(len(d.flags))
	for _, f := range d.flags {
		conn.WriteString(f)
	}
	conn.WriteInt(d.keys[0]) // first key
	conn.WriteInt(d.keys[1]) // last key
	conn.WriteInt(d.keys[2]) // step
	conn.WriteArray(0)
	conn.WriteArray(0)
	conn.WriteArray(0)
	conn.WriteArray(0)
}

// configValues answers CONFIG GET for the parameters tools ask about.
func (s *Server) configValues() map[string]string {
	return map[string]string{
		"save":               "",
		"appendonly":         "no",
		"databases":          "1",
		"port":               strconv.Itoa(s.cfg.Port),
		"bind":               s.cfg.Bind,
		"maxclients":         strconv.Itoa(s.cfg.MaxClients),
		"timeout":            "0",
		"maxmemory":          "0",
		"proto-max-bulk-len": strconv.Itoa(s.cfg.Limits.MaxBulk),
	}
}

func cmdConfig(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	switch strings.ToLower(string(args[1])) {
	case "get":
		values := s.configValues()
		var keys []string
		for k := range values {
			for _, pat := range args[2:] {
				if ok, _ := path.Match(strings.ToLower(string(pat)), k); ok {
					keys = append(keys, k)
					break
				}
			}
		}
		sort.Strings(keys)
		writeMap(conn, c, len(keys))
		for _, k := range keys {
			conn.WriteBulkString(k)
			conn.WriteBulkString(values[k])
		}
	case "resetstat":
		s.resetStats()
		conn.WriteString("OK")
	case "set":
		s.errorReply(conn, "ERR CONFIG SET is not supported: idserver is configured by flags at start")
	}
}

func cmdTime(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	now := s.cfg.Now()
	conn.WriteArray(2)
	conn.WriteBulkString(strconv.FormatInt(now.Unix(), 10))
	conn.WriteBulkString(strconv.Itoa(now.Nanosecond() / 1000))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// helpCommand answers CLIENT HELP, CONFIG HELP, COMMAND HELP and CLUSTER
// HELP: the command's subcommands, one status line each, as Redis lists
// them (without Redis's descriptions).
var helpCommand = &command{name: "help", handler: func(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	name := strings.ToUpper(string(args[0]))
	def := commandTable[strings.ToLower(name)]
	subs := make([]string, 0, len(def.subs))
	for sub := range def.subs {
		subs = append(subs, strings.ToUpper(sub))
	}
	sort.Strings(subs)
	conn.WriteArray(len(subs) + 1)
	conn.WriteString(name + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
	for _, sub := range subs {
		conn.WriteString(sub)
	}
}}
