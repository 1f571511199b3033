package resp

import (
	"strings"
	"sync/atomic"
	"time"
)

// LatencyBounds are the upper bounds of the command latency buckets.
var LatencyBounds = []time.Duration{
	25 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond,
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond, time.Second,
}

// ErrorCodes are the error reply codes counted one by one; others count as ERR.
// PROTOCOL is last: refuseFrame counts it by that place.
var ErrorCodes = []string{"ERR", "CLOCKBACK", "TRYAGAIN", "NOAUTH", "WRONGPASS", "NOPROTO", "EXECABORT", "LOADING", "PROTOCOL"}

// latencySample: one call in this many, of each command, is timed. A
// clock read costs about as much as issuing an ID, so timing every command
// would cost a tenth of the server's time; calls are still counted exactly.
const latencySample = 16

// commandStats is one command's counters, updated with atomics only.
type commandStats struct {
	calls    atomic.Int64
	errors   atomic.Int64
	rejected atomic.Int64     // refused before running (arity, NOAUTH, LOADING), as Redis's rejected_calls
	issued   atomic.Int64     // IDs or segment values handed out
	timed    atomic.Int64     // calls whose latency was measured (one in latencySample)
	nanos    atomic.Int64     // their total latency
	buckets  [13]atomic.Int64 // len(LatencyBounds)+1, the last for +Inf
}

func (c *commandStats) observe(d time.Duration) {
	c.timed.Add(1)
	c.nanos.Add(int64(d))
	i := 0
	for i < len(LatencyBounds) && d > LatencyBounds[i] {
		i++
	}
	c.buckets[i].Add(1)
}

// CommandStat is a snapshot of one command's counters.
type CommandStat struct {
	Name     string
	Calls    int64
	Errors   int64
	Rejected int64         // refused before running: not in Calls, as in Redis
	Issued   int64         // IDs (NEXTID, GENEID) or values (INCR, INCRBY, NEXTSEG) handed out
	Timed    int64         // calls whose latency was measured
	Total    time.Duration // their total latency
	Buckets  []int64       // timed calls per bucket of LatencyBounds, then +Inf; not cumulative
}

// CommandStats reports every command that was called at least once.
func (s *Server) CommandStats() []CommandStat {
	var out []CommandStat
	for _, name := range sortedCommandNames() {
		st := &s.cmdStats[commandTable[name].index]
		if st.calls.Load() == 0 && st.rejected.Load() == 0 && st.issued.Load() == 0 {
			continue
		}
		cs := CommandStat{Name: name, Calls: st.calls.Load(), Errors: st.errors.Load(), Rejected: st.rejected.Load(), Issued: st.issued.Load(),
			Timed: st.timed.Load(), Total: time.Duration(st.nanos.Load())}
		for i := range st.buckets {
			cs.Buckets = append(cs.Buckets, st.buckets[i].Load())
		}
		out = append(out, cs)
	}
	return out
}

// ErrorCounts reports error replies by code (PROTOCOL: frames refused).
func (s *Server) ErrorCounts() map[string]int64 {
	out := map[string]int64{}
	for i, code := range ErrorCodes {
		out[code] = s.errorsByCode[i].Load()
	}
	return out
}

// Counters are the server's connection totals, for metrics.
type Counters struct {
	Connections, Clients, Rejected int64
	SlowClients                    int64 // closed for not reading their replies
}

// Counters reports totals.
func (s *Server) Counters() Counters {
	return Counters{
		Connections: s.stats.connections.Load(),
		Clients:     int64(s.connectedClients()),
		Rejected:    s.stats.rejected.Load(),
		SlowClients: s.stats.slowClients.Load(),
	}
}

// countError counts an error reply by its code.
func (s *Server) countError(msg string) {
	code, _, _ := strings.Cut(msg, " ")
	for i, c := range ErrorCodes {
		if c == code {
			s.errorsByCode[i].Add(1)
			return
		}
	}
	s.errorsByCode[0].Add(1)
}

// resetStats is CONFIG RESETSTAT: the counters Redis's resetServerStats
// zeroes (commands, connections, rejected connections, error replies by
// code, keyspace hits and misses, net bytes, the memory peak and the
// instantaneous samples) and every command's calls, errors and latency
// (Redis's resetCommandTableStats and resetErrorTableStats). What idserver
// handed out (ids_issued, segment_values_issued) is not a statistic of
// the server's load but of the IDs, and stays.
func (s *Server) resetStats() {
	for _, c := range []*atomic.Int64{&s.stats.connections, &s.stats.commands, &s.stats.rejected,
		&s.stats.slowClients, &s.stats.errorReplies, &s.stats.keyspaceHits, &s.stats.keyspaceMisses,
		&s.stats.netInput, &s.stats.netOutput, &s.stats.reads, &s.stats.authFailures} {
		c.Store(0)
	}
	for i := range s.errorsByCode {
		s.errorsByCode[i].Store(0)
	}
	for i := range s.cmdStats {
		st := &s.cmdStats[i]
		st.calls.Store(0)
		st.errors.Store(0)
		st.rejected.Store(0)
		st.timed.Store(0)
		st.nanos.Store(0)
		for j := range st.buckets {
			st.buckets[j].Store(0)
		}
	}
	s.resetSamples()
}

// issued sums what the named commands handed out.
func (s *Server) issued(commands ...string) int64 {
	var n int64
	for _, name := range commands {
		n += s.cmdStats[commandTable[name].index].issued.Load()
	}
	return n
}
