package resp

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"idserver/engine"
)

// infoSection is one "# Name" section of INFO. Its lines are built only
// when the section is asked for, and each is a fixed number of lines:
// per-tag detail is paged through SCAN (names) and GET.
type infoSection struct {
	name  string
	in    infoSet // the smallest set it belongs to
	lines func(s *Server) []string
}

// infoSet: INFO with no argument (or "default"), "all", "everything".
type infoSet int

const (
	inDefault    infoSet = iota // also in all and everything
	inAll                       // also in everything (Redis's commandstats)
	inEverything                // only everything, or by name (Redis's module sections)
)

// infoSections are in Redis's order, with idserver's own sections where
// they fit. Segments walks every local buffer (fixed size, but O(tags) in
// time), so only "everything" or "INFO segments" builds it, and scrapers
// asking for "all", as redis_exporter does, never pay for it.
var infoSections = []infoSection{
	{"Server", inDefault, (*Server).infoServer},
	{"Clients", inDefault, (*Server).infoClients},
	{"Memory", inDefault, (*Server).infoMemory},
	{"Persistence", inDefault, (*Server).infoPersistence},
	{"Stats", inDefault, (*Server).infoStats},
	{"Replication", inDefault, (*Server).infoReplication},
	{"CPU", inDefault, (*Server).infoCPU},
	{"Snowflake", inDefault, (*Server).infoSnowflake},
	{"Segments", inEverything, (*Server).infoSegments},
	{"Commandstats", inAll, (*Server).infoCommandstats},
	{"Errorstats", inDefault, (*Server).infoErrorstats},
	{"Cluster", inDefault, (*Server).infoCluster},
	{"Keyspace", inDefault, (*Server).infoKeyspace},
}

// cmdInfo: INFO [section ...], with Redis's "default", "all" and "everything".
func cmdInfo(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	if len(want) == 0 {
		want["default"] = true
	}
	set := infoSet(-1)
	switch {
	case want["everything"]:
		set = inEverything
	case want["all"]:
		set = inAll
	case want["default"]:
		set = inDefault
	}
	var b strings.Builder
	for _, sec := range infoSections {
		if sec.in > set && !want[strings.ToLower(sec.name)] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + sec.name + "\r\n")
		for _, l := range sec.lines(s) {
			b.WriteString(l + "\r\n")
		}
	}
	conn.WriteBulkString(b.String())
}

func kv(k string, v any) string { return fmt.Sprintf("%s:%v", k, v) }

// infoServer: Redis's fields, with idserver's version and the commit it
// was built from as Redis gives its own (redis_git_sha1, redis_git_dirty):
// 00000000 when unknown.
func (s *Server) infoServer() []string {
	sha1, dirty := strings.CutSuffix(s.cfg.Commit, "-dirty")
	if sha1 == "" {
		sha1 = "00000000"
	}
	return []string{
		kv("redis_version", RedisVersion),
		kv("idserver_version", s.cfg.Version),
		kv("idserver_git_sha1", sha1),
		kv("idserver_git_dirty", b2i(dirty)),
		kv("redis_mode", s.redisMode()),
		kv("os", "linux"),
		kv("arch_bits", strconv.IntSize),
		kv("process_id", os.Getpid()),
		kv("run_id", s.cfg.NodeID),
		kv("tcp_port", s.cfg.Port),
		kv("uptime_in_seconds", int(time.Since(s.started).Seconds())),
		kv("uptime_in_days", int(time.Since(s.started).Hours()/24)),
	}
}

func (s *Server) infoClients() []string {
	return []string{
		kv("connected_clients", s.connectedClients()),
		kv("blocked_clients", 0), // no command blocks
		kv("maxclients", s.cfg.MaxClients),
		kv("client_output_buffer_limit_disconnections", s.stats.slowClients.Load()),
	}
}

// tagStore is what a ClusterNode may say of the store its tags are in:
// bytes on disk, and bytes in memory (the store's cache and memtables:
// outside the Go heap in a cgo build, inside it with CGO_ENABLED=0).
type tagStore interface {
	TagStoreBytes() (disk, memory uint64)
}

// bufferCount is what a SegmentServer may say of its buffers: how many
// tags hold one (engine.Segments.Buffers, without walking them).
type bufferCount interface {
	Buffers() int
}

// infoMemory: Redis's fields, then the tags' memory: the tag store's
// (inside used_memory_rss; inside used_memory too only in a build without
// cgo), its size on disk, and the segment buffers (about
// engine.BufferBytes each, inside used_memory).
func (s *Server) infoMemory() []string {
	used, rss := s.usedMemory(), residentMemory()
	peak := s.instant.peakMemory.Load()
	lines := []string{
		kv("used_memory", used),
		kv("used_memory_human", humanBytes(used)),
		kv("used_memory_rss", rss),
		kv("used_memory_rss_human", humanBytes(rss)),
		kv("used_memory_peak", peak),
		kv("used_memory_peak_human", humanBytes(peak)),
		kv("maxmemory", 0),
		kv("maxmemory_policy", "noeviction"),
	}
	if st, ok := s.cfg.Cluster.(tagStore); ok {
		disk, mem := st.TagStoreBytes()
		lines = append(lines,
			kv("tag_store_memory", mem),
			kv("tag_store_memory_human", humanBytes(int64(mem))),
			kv("tag_store_disk", disk),
			kv("tag_store_disk_human", humanBytes(int64(disk))))
	}
	if bc, ok := s.cfg.Segments.(bufferCount); ok {
		n := bc.Buffers()
		lines = append(lines,
			kv("segment_buffers", n),
			kv("segment_buffers_memory", int64(n)*engine.BufferBytes),
			kv("segment_buffers_memory_human", humanBytes(int64(n)*engine.BufferBytes)))
	}
	return lines
}

func (s *Server) infoPersistence() []string {
	st := s.ids.Status()
	lines := []string{kv("loading", b2i(!s.isReady()))}
	if !s.isReady() {
		lines = append(lines, kv("loading_eta_seconds", 1)) // ioredis waits this long before asking again
	}
	return append(lines,
		kv("high_water_ms", st.HighWaterMS),
		kv("window_ahead_ms", st.WindowAheadMS),
	)
}

func (s *Server) infoStats() []string {
	errs := s.ErrorCounts()
	ops, inKbps, outKbps := s.instantaneous()
	return []string{
		kv("total_connections_received", s.stats.connections.Load()),
		kv("total_commands_processed", s.stats.commands.Load()),
		kv("instantaneous_ops_per_sec", int64(ops)),
		kv("total_net_input_bytes", s.stats.netInput.Load()),
		kv("total_net_output_bytes", s.stats.netOutput.Load()),
		kv("total_reads_processed", s.stats.reads.Load()),
		kv("instantaneous_input_kbps", fmt.Sprintf("%.2f", inKbps)),
		kv("instantaneous_output_kbps", fmt.Sprintf("%.2f", outKbps)),
		kv("rejected_connections", s.stats.rejected.Load()),
		kv("keyspace_hits", s.stats.keyspaceHits.Load()),
		kv("keyspace_misses", s.stats.keyspaceMisses.Load()),
		kv("ids_issued", s.issued("nextid", "nextidruns", "geneid", "geneidruns")),
		kv("segment_values_issued", s.issued("incr", "incrby", "nextseg")),
		kv("total_error_replies", s.stats.errorReplies.Load()),
		kv("tryagain_errors", errs["TRYAGAIN"]),
		kv("protocol_errors", errs["PROTOCOL"]),
		kv("clockback_errors", errs["CLOCKBACK"]),
		kv("auth_failures", errs["WRONGPASS"]),
		kv("acl_access_denied_auth", s.stats.authFailures.Load()),
	}
}

// infoReplication: every node accepts writes, so every node is a master
// to a client or a proxy's health check; the Raft role is in # Cluster.
func (s *Server) infoReplication() []string {
	return []string{
		kv("role", "master"),
		kv("connected_slaves", 0),
		kv("master_repl_offset", 0),
	}
}

// infoSnowflake: the layout (id-bits and time unit explicit, whatever
// the layout's name omits) and when its time bits run out, with the years
// left from now.
func (s *Server) infoSnowflake() []string {
	st := s.ids.Status()
	l := s.ids.Layout()
	left := l.TimeLeft(s.cfg.Now())
	// The layout's fields, comma-separated, and its reserved worker IDs
	// on a line of their own: their list has commas too.
	shape := l
	shape.Reserved = ""
	return []string{
		kv("node_id", s.cfg.NodeID),
		kv("worker_id", st.Worker),
		kv("layout", strings.ReplaceAll(shape.String(), " ", ",")),
		kv("reserved_workers", l.Reserved),
		kv("id_bits", l.Bits()),
		kv("time_unit_ms", l.UnitMS()),
		kv("time_bits_end", l.End().Format(time.RFC3339)),
		kv("time_bits_years_left", strconv.FormatFloat(left.Hours()/(365.25*24), 'f', 2, 64)),
		kv("logical_clock_ms", st.LogicalMS),
		kv("last_id_time_ms", st.LastTimeMS),
		kv("clock_borrow_ms", st.BorrowMS),
		kv("clock_counter", st.Counter),
		kv("window_sync_waits", st.WindowSyncWaits),
	}
}

// infoSegments sums the local buffers (one pass over the buffered tags,
// only when asked for).
func (s *Server) infoSegments() []string {
	lister, ok := s.cfg.Segments.(interface{ Status() []engine.SegmentStatus })
	if !ok {
		return nil
	}
	var tags, refilling, left, refills int64
	for _, st := range lister.Status() {
		tags++
		refilling += int64(b2i(st.Refilling))
		left += st.Left + st.SpareLeft
		refills += st.Refills
	}
	return []string{
		kv("buffered_tags", tags),
		kv("buffered_values", left),
		kv("refills", refills),
		kv("refilling", refilling),
	}
}

func (s *Server) infoCommandstats() []string {
	var lines []string
	for _, cs := range s.CommandStats() {
		if cs.Calls == 0 && cs.Rejected == 0 {
			continue // only what it issued is left since CONFIG RESETSTAT
		}
		// usec is estimated from the timed sample (one call in latencySample).
		perCall := 0.0
		if cs.Timed > 0 {
			perCall = float64(cs.Total.Microseconds()) / float64(cs.Timed)
		}
		lines = append(lines, fmt.Sprintf("cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,failed_calls=%d",
			cs.Name, cs.Calls, int64(perCall*float64(cs.Calls)), perCall, cs.Rejected, cs.Errors))
	}
	return lines
}

func (s *Server) infoErrorstats() []string {
	errs := s.ErrorCounts()
	var lines []string
	for _, code := range ErrorCodes {
		if n := errs[code]; n > 0 {
			lines = append(lines, fmt.Sprintf("errorstat_%s:count=%d", code, n))
		}
	}
	return lines
}

// infoCluster: cluster_enabled, 1 in the emulated cluster mode (every node
// answers CLUSTER SLOTS as the master of every slot: clustermode.go), then
// the Raft view; its role is raft_role, so that a client folding INFO into
// one map keeps role:master.
func (s *Server) infoCluster() []string {
	lines := []string{kv("cluster_enabled", b2i(s.cfg.EmulateCluster))}
	if s.cfg.Cluster == nil {
		return lines
	}
	for _, pair := range s.cfg.Cluster.Info() {
		k := pair[0]
		if k == "role" {
			k = "raft_role"
		}
		lines = append(lines, k+":"+pair[1])
	}
	return lines
}

func (s *Server) infoKeyspace() []string {
	if s.cfg.Cluster == nil {
		return nil
	}
	if n := s.cfg.Cluster.Size(); n > 0 {
		return []string{fmt.Sprintf("db0:keys=%d,expires=0,avg_ttl=0", n)}
	}
	return nil
}
