package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"idserver/cluster"
	"idserver/engine"
	"idserver/resp"
)

// metricsServer serves /metrics and /healthz. Its sources are set once the
// node can issue; until then /healthz answers 503. /healthz is the liveness
// probe; /healthz?ready the readiness probe (deploy/kubernetes). With a
// password (--requirepass), /metrics answers only a request that carries it
// as HTTP basic auth, under any user name; /healthz says no more than ready
// or not, and stays open for the probes (docs/operations.md, "Metrics").
type metricsServer struct {
	srv   *http.Server
	ready atomic.Bool
	src   atomic.Pointer[metricSources]
}

type metricSources struct {
	resp      *resp.Server
	gen       *engine.Generator
	segs      *engine.Segments
	cl        *cluster.Cluster
	notMember func() bool
	// ready is nil while the node issues NEXTID, else why not (node.Ready).
	ready func() error
	// tlsNotAfter is when the TLS certificate in use expires; nil without TLS.
	tlsNotAfter func() time.Time
}

func startMetrics(addr, password string, log *slog.Logger) (*metricsServer, error) {
	m := &metricsServer{}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), m)
	mux := http.NewServeMux()
	mux.Handle("/metrics", withPassword(password, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !m.ready.Load() {
			http.Error(w, "not ready: joining the cluster or shutting down", http.StatusServiceUnavailable)
			return
		}
		// Removed by the cluster while it runs: it hands out nothing, and
		// a restart joins it again, which a failing liveness probe gets.
		if src := m.src.Load(); src != nil && src.notMember() {
			http.Error(w, "not a member: the cluster removed this node (CLUSTER FORGET, or cut off for --dead-member-after); restart it to join again",
				http.StatusServiceUnavailable)
			return
		}
		// ?ready: a readiness probe; also wait until autopilot settled this
		// node (a voter, or the voters complete), so that a rolling update
		// takes the next pod only once this one can stand in for it.
		if src := m.src.Load(); r.URL.Query().Has("ready") && src != nil && !src.cl.Settled() {
			http.Error(w, "not ready: autopilot has not settled this member yet (it is not a voter and voters are missing)",
				http.StatusServiceUnavailable)
			return
		}
		// ?ready: and it issues NEXTID now (a worker lease covers the
		// clock), so that no client is sent to a node that answers
		// TRYAGAIN; the liveness probe does not ask it, since a node
		// cut off from the quorum mends by itself once it is reached.
		if src := m.src.Load(); r.URL.Query().Has("ready") && src != nil && src.ready != nil {
			if err := src.ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ok\n"))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return m, nil
}

// withPassword serves h only to a request whose basic-auth password is
// password; an empty password serves every request.
func withPassword(password string, h http.Handler) http.Handler {
	if password == "" {
		return h
	}
	want := sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, got, ok := r.BasicAuth()
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="idserver metrics"`)
			http.Error(w, "the metrics need the password (--requirepass) as HTTP basic auth", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (m *metricsServer) serve(src *metricSources) {
	m.src.Store(src)
	m.ready.Store(true)
}

func (m *metricsServer) close() {
	m.ready.Store(false)
	m.srv.Close()
}

var (
	descCommands  = prometheus.NewDesc("idserver_commands_total", "Commands answered, by command.", []string{"command"}, nil)
	descCmdErrors = prometheus.NewDesc("idserver_command_errors_total", "Commands answered with an error, by command.", []string{"command"}, nil)
	descLatency   = prometheus.NewDesc("idserver_command_duration_seconds", "Time to answer a command, by command; one call in 16 per connection is timed.", []string{"command"}, nil)
	descErrors    = prometheus.NewDesc("idserver_errors_total", "Error replies by code (PROTOCOL: frames refused).", []string{"code"}, nil)
	descIDs       = prometheus.NewDesc("idserver_ids_issued_total", "Snowflake and gene IDs issued, by command.", []string{"command"}, nil)
	descValues    = prometheus.NewDesc("idserver_segment_values_issued_total", "Segment values handed out, by command.", []string{"command"}, nil)
	descClients   = prometheus.NewDesc("idserver_connected_clients", "Open client connections.", nil, nil)
	descConns     = prometheus.NewDesc("idserver_connections_total", "Client connections accepted.", nil, nil)
	descRejected  = prometheus.NewDesc("idserver_rejected_connections_total", "Connections refused at --maxclients.", nil, nil)
	descSlow      = prometheus.NewDesc("idserver_output_limit_disconnections_total", "Connections closed because the client did not read its replies (--client-output-timeout).", nil, nil)
	descBorrow    = prometheus.NewDesc("idserver_clock_borrow_ms", "How far issued IDs run ahead of the wall clock.", nil, nil)
	descHeadroom  = prometheus.NewDesc("idserver_window_headroom_ms", "Durable high-water minus the wall clock.", nil, nil)
	descLease     = prometheus.NewDesc("idserver_worker_lease_remaining_ms", "Committed worker lease end minus the wall clock; IDs stop at 0.", nil, nil)
	descSyncWaits = prometheus.NewDesc("idserver_window_sync_waits_total", "Requests that reached the durable high-water and stored the next one themselves, the background step having fallen behind (INFO snowflake window_sync_waits).", nil, nil)
	descTimeLeft  = prometheus.NewDesc("idserver_layout_time_left_seconds", "Seconds until the layout's time bits run out (INFO snowflake time_bits_end); a node refuses to start with less than a year.", nil, nil)
	descLeader    = prometheus.NewDesc("idserver_raft_leader", "1 if this node leads.", nil, nil)
	descTerm      = prometheus.NewDesc("idserver_raft_term", "Raft term.", nil, nil)
	descApplied   = prometheus.NewDesc("idserver_raft_applied_index", "Last Raft index applied to the state machine.", nil, nil)
	descApplies   = prometheus.NewDesc("idserver_raft_applies_total", "Log entries this node proposed as leader.", nil, nil)
	descTags      = prometheus.NewDesc("idserver_tags", "Tags in the cluster's state, as DBSIZE counts them.", nil, nil)
	descMaxTags   = prometheus.NewDesc("idserver_max_tags", "The cluster's bound on tags (--max-tags) as this node applied it; 0: none.", nil, nil)
	descBufTags   = prometheus.NewDesc("idserver_segment_buffered_tags", "Tags with segments buffered on this node.", nil, nil)
	descBuffered  = prometheus.NewDesc("idserver_segment_buffered_values", "Values buffered on this node over all tags (current and spare segments).", nil, nil)
	descBufBytes  = prometheus.NewDesc("idserver_segment_buffer_bytes", "Memory of this node's segment buffers, about 200 bytes each (INFO memory segment_buffers_memory).", nil, nil)
	descTagStore  = prometheus.NewDesc("idserver_tag_store_bytes", "The tag store (Pebble): bytes on disk, and in memory (block cache and memtables; outside the Go heap in a cgo build) (INFO memory tag_store_disk, tag_store_memory).", []string{"where"}, nil)
	descVoters    = prometheus.NewDesc("idserver_raft_voters", "Voters in this node's latest Raft configuration.", nil, nil)
	descMembers   = prometheus.NewDesc("idserver_members", "Members by health, as the leader's autopilot sees them (unknown: no view yet).", []string{"health"}, nil)
	descFree      = prometheus.NewDesc("idserver_worker_ids_free", "Worker IDs no member holds.", nil, nil)
	descTLSExpiry = prometheus.NewDesc("idserver_tls_cert_expiry_seconds", "Seconds until the TLS certificate in use expires (its NotAfter); negative once it has; absent without TLS.", nil, nil)
	descAuthFail  = prometheus.NewDesc("idserver_auth_failures_total", "AUTH and HELLO AUTH refused for a wrong password (INFO acl_access_denied_auth).", nil, nil)

	descDiskSync = prometheus.NewDesc("idserver_disk_sync_seconds", "Longest disk sync (Raft log, Pebble) of the last 10 to 20 seconds, one still running included.", nil, nil)
	descCommit   = prometheus.NewDesc("idserver_raft_commit_seconds", "Longest commit of an entry this node proposed as leader, over the last 10 to 20 seconds.", nil, nil)
	descSlowDisk = prometheus.NewDesc("idserver_slow_disk_total", "Disk syncs slower than the slow-sync threshold (twice the election timeout).", nil, nil)
	descHandoffs = prometheus.NewDesc("idserver_slow_disk_handoffs_total", "Leaderships this node handed to another voter because its disk was slow.", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *metricsServer) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCommands, descCmdErrors, descLatency, descErrors, descIDs, descValues,
		descClients, descConns, descRejected, descSlow, descBorrow, descHeadroom, descLease, descSyncWaits, descTimeLeft, descLeader, descTerm, descApplied, descApplies,
		descTags, descMaxTags, descBufTags, descBuffered, descBufBytes, descTagStore, descVoters, descMembers, descFree, descAuthFail, descTLSExpiry, descDiskSync, descCommit, descSlowDisk, descHandoffs} {
		ch <- d
	}
	for _, d := range healthDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector, reading the counters at scrape.
func (m *metricsServer) Collect(ch chan<- prometheus.Metric) {
	src := m.src.Load()
	if src == nil {
		return
	}
	// A sample the library refuses (a label that is not UTF-8) is left
	// out: a panic here would end the process.
	send := func(d *prometheus.Desc, kind prometheus.ValueType, v float64, labels ...string) {
		if m, err := prometheus.NewConstMetric(d, kind, v, labels...); err == nil {
			ch <- m
		}
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) { send(d, prometheus.CounterValue, v, labels...) }
	gauge := func(d *prometheus.Desc, v float64, labels ...string) { send(d, prometheus.GaugeValue, v, labels...) }
	for _, cs := range src.resp.CommandStats() {
		counter(descCommands, float64(cs.Calls), cs.Name)
		switch cs.Name {
		case "nextid", "nextidruns", "geneid", "geneidruns":
			counter(descIDs, float64(cs.Issued), cs.Name)
		case "incr", "incrby", "nextseg":
			counter(descValues, float64(cs.Issued), cs.Name)
		}
		counter(descCmdErrors, float64(cs.Errors), cs.Name)
		buckets := map[float64]uint64{}
		cum := uint64(0)
		for i, bound := range resp.LatencyBounds {
			cum += uint64(cs.Buckets[i])
			buckets[bound.Seconds()] = cum
		}
		if h, err := prometheus.NewConstHistogram(descLatency, uint64(cs.Timed), cs.Total.Seconds(), buckets, cs.Name); err == nil {
			ch <- h
		}
	}
	for code, n := range src.resp.ErrorCounts() {
		counter(descErrors, float64(n), code)
	}
	c := src.resp.Counters()
	gauge(descClients, float64(c.Clients))
	counter(descConns, float64(c.Connections))
	counter(descRejected, float64(c.Rejected))
	counter(descSlow, float64(c.SlowClients))
	counter(descAuthFail, float64(src.resp.AuthFailures()))
	if src.tlsNotAfter != nil {
		gauge(descTLSExpiry, time.Until(src.tlsNotAfter()).Seconds())
	}
	st := src.gen.Status()
	gauge(descBorrow, float64(st.BorrowMS))
	gauge(descHeadroom, float64(st.WindowAheadMS))
	gauge(descLease, float64(st.LeaseEndMS-(st.HighWaterMS-st.WindowAheadMS)))
	counter(descSyncWaits, float64(st.WindowSyncWaits))
	gauge(descTimeLeft, src.gen.Layout().TimeLeft(time.Now()).Seconds())
	cs := src.cl.Status()
	leader := 0.0
	if src.cl.IsLeader() {
		leader = 1
	}
	gauge(descLeader, leader)
	num := func(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }
	gauge(descTerm, num(cs.Term))
	gauge(descApplied, float64(cs.AppliedIndex))
	counter(descApplies, float64(cs.AppliesProposed))
	gauge(descVoters, float64(cs.Voters))
	byHealth := map[string]int{"healthy": 0, "unhealthy": 0, "failed": 0, "unknown": 0}
	for _, m := range cs.Members {
		byHealth[m.Health]++
	}
	for h, n := range byHealth {
		gauge(descMembers, float64(n), h)
	}
	gauge(descFree, float64(src.cl.FreeWorkers()))
	gauge(descDiskSync, cs.Disk.SyncSeconds)
	gauge(descCommit, cs.Disk.CommitSeconds)
	counter(descSlowDisk, float64(cs.Disk.SlowSyncs))
	counter(descHandoffs, float64(cs.Disk.Handoffs))
	gauge(descTags, float64(src.cl.Size()))
	gauge(descMaxTags, float64(cs.MaxTags))
	buffers, buffered := src.segs.Totals()
	gauge(descBufTags, float64(buffers))
	gauge(descBuffered, float64(buffered))
	gauge(descBufBytes, float64(buffers*engine.BufferBytes))
	disk, mem := src.cl.TagStoreBytes()
	gauge(descTagStore, float64(disk), "disk")
	gauge(descTagStore, float64(mem), "memory")
	collectHealth(src, cs, st, gauge)
}

// What the alert rules (deploy/prometheus) ask of one node: can it issue,
// does it know a leader, how many voters may fail, how far its state
// machine trails its log, how much disk it has above the reserve.
var (
	descCanIssue  = prometheus.NewDesc("idserver_can_issue", "1 while this node is a member and holds a worker lease that has not ended: NEXTID and GENEID answer.", nil, nil)
	descHasLeader = prometheus.NewDesc("idserver_raft_has_leader", "1 if this node knows a Raft leader.", nil, nil)
	descTolerance = prometheus.NewDesc("idserver_raft_failure_tolerance", "Voters the cluster can lose now and keep a quorum, in this node's view (0 without a leader).", nil, nil)
	descCommitIdx = prometheus.NewDesc("idserver_raft_commit_index", "Last Raft index this node knows committed.", nil, nil)
	descDiskFree  = prometheus.NewDesc("idserver_disk_free_bytes", "Free space on the data directory's file system; absent where it cannot tell.", nil, nil)
	descReserve   = prometheus.NewDesc("idserver_disk_reserve_bytes", "Free space below which the store refuses writes (disk full); absent where it cannot tell.", nil, nil)

	healthDescs = []*prometheus.Desc{descCanIssue, descHasLeader, descTolerance, descCommitIdx, descDiskFree, descReserve}
)

func collectHealth(src *metricSources, cs cluster.Status, st engine.Status, gauge func(*prometheus.Desc, float64, ...string)) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	leaseLeft := st.LeaseEndMS - (st.HighWaterMS - st.WindowAheadMS)
	gauge(descCanIssue, b(st.LeaseEndMS > 0 && leaseLeft > 0 && !src.notMember()))
	gauge(descHasLeader, b(cs.LeaderID != ""))
	gauge(descTolerance, float64(cs.FailureTolerance))
	commit, _ := strconv.ParseFloat(cs.CommitIndex, 64)
	gauge(descCommitIdx, commit)
	if free, reserve, ok := src.cl.DiskSpace(); ok {
		gauge(descDiskFree, float64(free))
		gauge(descReserve, float64(reserve))
	}
}
