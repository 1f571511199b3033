package main

// idserver status: one node's view of the cluster, read from CLUSTER INFO,
// for an operator or a script (--json), with an exit code that says whether
// the cluster can issue.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// statusMember is one member as idserver status reports it.
type statusMember struct {
	ID       string `json:"id"`
	Worker   int64  `json:"worker"`
	RESP     string `json:"resp"`
	Raft     string `json:"raft"`
	Suffrage string `json:"suffrage"`
	Zone     string `json:"zone"`
	Health   string `json:"health"`
	Leader   bool   `json:"leader"`
	// LastContactMS is since the leader last heard from it; -1 when unknown.
	LastContactMS int64 `json:"last_contact_ms"`
	// Trails is how many Raft entries its log is behind the leader's; -1
	// when unknown.
	Trails int64 `json:"trails"`
	// LeaseLeftMS is its worker lease's end minus the asked node's clock;
	// -1 when it holds no lease.
	LeaseLeftMS int64  `json:"lease_left_ms"`
	Version     string `json:"version"`
}

// clusterStatus is what idserver status prints.
type clusterStatus struct {
	Node      string `json:"node"`       // the node asked
	ClusterID string `json:"cluster_id"` // empty before it belongs to one
	Leader    string `json:"leader"`     // the leader's node ID; empty when the node knows none
	Term      int64  `json:"term"`
	Voters    int    `json:"voters"`
	// FailureTolerance is how many voters can fail now with a quorum left.
	FailureTolerance int `json:"failure_tolerance"`
	// LeaseLeftMS is the asked node's worker lease end minus its clock;
	// -1 when it holds none.
	LeaseLeftMS int64          `json:"lease_left_ms"`
	Members     []statusMember `json:"members"`
	// CanIssue: the node knows a leader and its worker lease runs.
	CanIssue bool `json:"can_issue"`
	// Problems say why it cannot issue, or what cuts its tolerance.
	Problems []string `json:"problems"`
}

// runStatus: idserver status --addr host:port [--password P] [--json]
// prints the cluster as the node at addr sees it. It exits 0 when the
// cluster can issue, 1 when it cannot or the node does not answer, 2 on a
// usage error.
func runStatus(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idserver status", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:6380", "RESP address of any node")
	pass := fs.String("password", getenv("IDSERVER_REQUIREPASS"), "the node's --requirepass")
	caFile := fs.String("tls-ca", "", "PEM CA bundle: reach a node started with --tls-cert over TLS, verifying it against these")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the node")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: idserver status --addr host:port [--password P] [--tls-ca FILE] [--timeout D] [--json]\n"+
			"exits 0 when the cluster can issue, 1 when it cannot (or the node does not answer), 2 on a usage error")
		fs.PrintDefaults()
	}
	if code, done := parseSubcommand(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		fmt.Fprintf(stderr, "idserver status: --addr %q: host:port expected\n", *addr)
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "idserver status: --timeout %v: more than 0 expected\n", *timeout)
		return 2
	}
	// go-redis logs its failed dials itself; the error below says it once.
	redis.SetLogger(quietRedis{})
	failed := func(err error) int {
		fmt.Fprintf(stderr, "idserver status: %s: %v\n", *addr, err)
		if *asJSON {
			json.NewEncoder(stdout).Encode(map[string]any{"addr": *addr, "error": err.Error(), "can_issue": false})
		}
		return 1
	}
	var tlsConfig *tls.Config
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintln(stderr, "idserver status:", err)
			return 2
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fmt.Fprintf(stderr, "idserver status: %s holds no PEM certificate\n", *caFile)
			return 2
		}
		tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: *addr, Password: *pass, Protocol: 2, DisableIdentity: true,
		MaxRetries: -1, DialTimeout: *timeout, ReadTimeout: *timeout, TLSConfig: tlsConfig})
	defer c.Close()
	info, err := c.Do(ctx, "CLUSTER", "INFO").Text()
	if err != nil {
		return failed(err)
	}
	now, err := nodeIDTime(ctx, c)
	if err != nil {
		return failed(err)
	}
	st := parseClusterStatus(info, now)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	} else {
		printStatus(stdout, st)
	}
	if !st.CanIssue {
		return 1
	}
	return 0
}

// nodeIDTime is the node's clock (TIME) in ID time: ms since its layout's
// epoch (INFO snowflake), which is what lease ends count in.
func nodeIDTime(ctx context.Context, c *redis.Client) (int64, error) {
	snow, err := c.Info(ctx, "snowflake").Result()
	if err != nil {
		return 0, err
	}
	var epoch time.Time
	for _, line := range strings.Split(snow, "\n") {
		if layout, ok := strings.CutPrefix(strings.TrimSpace(line), "layout:"); ok {
			for _, field := range strings.Split(layout, ",") {
				if v, ok := strings.CutPrefix(field, "epoch="); ok {
					epoch, err = time.Parse(time.RFC3339, v)
				}
			}
		}
	}
	if epoch.IsZero() || err != nil {
		return 0, fmt.Errorf("INFO snowflake names no layout epoch (%v)", err)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	return now.Sub(epoch).Milliseconds(), nil
}

// parseClusterStatus reads CLUSTER INFO's key:value lines; nowMS is the
// node's clock in ID time, which lease ends are measured against.
func parseClusterStatus(info string, nowMS int64) clusterStatus {
	kv := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			kv[k] = v
		}
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	leaseLeft := func(end int64) int64 {
		if end <= 0 {
			return -1
		}
		return max(0, end-nowMS)
	}
	st := clusterStatus{
		Node: kv["node_id"], ClusterID: kv["cluster_id"], Leader: kv["leader_id"], Term: atoi64(kv["term"]),
		Voters: int(num(kv["raft_voters"])), FailureTolerance: int(num(kv["raft_failure_tolerance"])),
		LeaseLeftMS: leaseLeft(num(kv["worker_lease_end_ms"])), Members: []statusMember{}, Problems: []string{},
	}
	for i := 0; ; i++ {
		line, ok := kv[fmt.Sprintf("member%d", i)]
		if !ok {
			break
		}
		f := map[string]string{}
		for _, field := range strings.Split(line, ",") {
			if k, v, ok := strings.Cut(field, "="); ok {
				f[k] = v
			}
		}
		trails := int64(-1)
		if v, ok := f["trails"]; ok {
			trails = num(v)
		}
		st.Members = append(st.Members, statusMember{
			ID: f["id"], Worker: num(f["worker"]), RESP: f["resp"], Raft: f["raft"], Suffrage: f["suffrage"], Zone: f["zone"],
			Health: f["health"], Leader: f["id"] == st.Leader, LastContactMS: num(f["last_contact_ms"]), Trails: trails,
			LeaseLeftMS: leaseLeft(num(f["lease_end_ms"])), Version: f["version"],
		})
	}
	if st.Leader == "" {
		st.Problems = append(st.Problems, fmt.Sprintf("node %s knows no leader: the voters it reaches are no quorum", st.Node))
	}
	if st.LeaseLeftMS <= 0 {
		st.Problems = append(st.Problems, fmt.Sprintf("node %s holds no running worker lease: NEXTID and GENEID answer TRYAGAIN", st.Node))
	}
	st.CanIssue = st.Leader != "" && st.LeaseLeftMS > 0
	for _, m := range st.Members {
		if m.Suffrage == "voter" && m.Health != "healthy" {
			st.Problems = append(st.Problems, fmt.Sprintf("voter %s is %s", m.ID, m.Health))
		}
	}
	return st
}

// printStatus writes st for a person: a summary, then a table of members.
func printStatus(w io.Writer, st clusterStatus) {
	leader := st.Leader
	if leader == "" {
		leader = "none"
	}
	can := "yes"
	if !st.CanIssue {
		can = "NO"
	}
	fmt.Fprintf(w, "node %s, cluster %s, term %d\n", st.Node, st.ClusterID, st.Term)
	fmt.Fprintf(w, "leader: %s\nvoters: %d, failure tolerance: %d\nlease left: %s\ncan issue: %s\n",
		leader, st.Voters, st.FailureTolerance, msOr(st.LeaseLeftMS, "none"), can)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nID\tSUFFRAGE\tZONE\tHEALTH\tLAST CONTACT\tTRAILS\tLEASE LEFT\tRESP\tVERSION")
	for _, m := range st.Members {
		id := m.ID
		if m.Leader {
			id += " (leader)"
		}
		trails := "unknown"
		if m.Trails >= 0 {
			trails = strconv.FormatInt(m.Trails, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, m.Suffrage, orDash(m.Zone), m.Health,
			msOr(m.LastContactMS, "unknown"), trails, msOr(m.LeaseLeftMS, "none"), m.RESP, m.Version)
	}
	tw.Flush()
	for _, p := range st.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
}

// msOr renders a duration in ms, or instead when it is negative.
func msOr(ms int64, instead string) string {
	if ms < 0 {
		return instead
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// quietRedis drops go-redis's own log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// atoi64 is s as a number, 0 when it is none.
func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
