package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"idserver/cluster"
	"idserver/engine"
	"idserver/resp"
)

// Config is everything idserver is started with.
type Config struct {
	Bind        string
	Port        int
	Dir         string
	NodeID      string
	RaftAddr    string
	Advertise   string
	RaftAdv     string
	WorkerLease time.Duration
	Recover     bool
	RecoverSkip int64
	Join        string
	SegmentStep int64
	Epoch       string
	TimeUnit    string // --time-unit: 1ms, 10ms or 1s
	Layout      engine.Layout
	// widthsGiven: a --time-bits, --worker-bits, --seq-bits or --gene-bits
	// flag (or its variable) was given; when none was, the widths follow
	// --id-bits and --time-unit (engine.AutoLayout).
	widthsGiven bool
	unitGiven   bool // --time-unit was given; else engine.AutoUnit picks it
	// ReservedWorkers is --reserved-workers as given: worker IDs no node
	// takes, part of the layout (Layout.Reserved, written canonically).
	ReservedWorkers string
	// AboveID is --above-id: a layout whose IDs do not sort above it now
	// is refused at start (0: no check).
	AboveID     int64
	Window      time.Duration
	MaxBorrow   time.Duration
	RequirePass string
	MaxBulk     int
	LogLevel    string
	LogFormat   string
	MaxClients  int
	TLSCert     string
	TLSKey      string
	TLSCA       string
	MetricsAddr string
	Voters      int
	MaxTags     int
	DeadAfter   time.Duration
	Zone        string
	ShowVersion bool
	EnableDebug bool // DEBUG CLOCK steps the clock IDs are issued on (fault tests only)
	// ClusterMode is --cluster-mode: off, or emulated (Redis Cluster's
	// commands, every node the master of every slot).
	ClusterMode string
	// SentinelMasters is --sentinel-masters, the names SENTINEL MASTERS lists.
	SentinelMasters string

	// SnapshotThreshold and SnapshotInterval are Raft's (0: Raft's 8192
	// entries, and cluster.DefaultSnapshotInterval).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration

	// ClusterSecret keys the handshake on the Raft port; RequirePass when empty.
	ClusterSecret string
	// ProtectedMode "yes" refuses a non-loopback bind with no secret at all.
	ProtectedMode string
	// ClientOutputLimit and ClientOutputTimeout bound the replies a client
	// has not read yet (resp.Config).
	ClientOutputLimit   int
	ClientOutputTimeout time.Duration

	// PublicKey is --public-key as given (hex), PublicKeyBytes the key
	// Validate reads from it (nil when not given).
	PublicKey      string
	PublicKeyBytes []byte

	// RaftTimeoutScale scales every Raft timing and the timeouts derived
	// from them (cluster.TimingFor).
	RaftTimeoutScale float64

	// envIgnored names the IDSERVER_<NAME> variables left unread because
	// their value is a Kubernetes service link (serviceLink), one warning
	// each.
	envIgnored []string
}

// parseConfig reads flags, then IDSERVER_<NAME> from the environment for
// each flag not given on the command line (--max-borrow: IDSERVER_MAX_BORROW).
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	def := engine.DefaultLayout()
	var c Config
	fs := flag.NewFlagSet("idserver", flag.ContinueOnError)
	// The flag package would print a flag error and then the whole usage;
	// run prints the error once with a hint, and --help the usage.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&c.Bind, "bind", "127.0.0.1", "RESP listen address")
	fs.IntVar(&c.Port, "port", 6380, "RESP port; 0 picks a free port and logs it")
	fs.StringVar(&c.Dir, "dir", "./idserver-data", "data directory (locked: one process per directory)")
	fs.StringVar(&c.NodeID, "node-id", "", "node ID (generated once and kept in --dir when empty)")
	fs.StringVar(&c.RaftAddr, "raft-addr", "", "Raft transport address (default: --bind with --port+10000, or a free port with --port 0)")
	fs.StringVar(&c.Join, "join", "", "RESP address (host:port) of a cluster member to join, or a comma-separated list (a StatefulSet's pods, this one's own among them: the first bootstraps when none of the others answers)")
	fs.StringVar(&c.Advertise, "advertise", "", "RESP address (host:port) clients and members reach this node at (default: the bound address)")
	fs.StringVar(&c.RaftAdv, "raft-advertise", "", "Raft address (host:port) members reach this node at (default: the bound Raft address)")
	fs.BoolVar(&c.Recover, "recover", false, "restart the cluster from this surviving member alone, after a majority is lost for good (see docs/operations.md)")
	fs.Int64Var(&c.RecoverSkip, "recover-skip", 1_000_000_000_000, "with --recover: how far every tag skips ahead, past what lost members may have allocated")
	fs.DurationVar(&c.WorkerLease, "worker-lease", 10*time.Second, "how long the worker ID lease runs ahead; a node cut off from the quorum stops issuing IDs when it ends")
	fs.Int64Var(&c.SegmentStep, "segment-step", 1000, "smallest segment a node fetches for a tag")
	fs.StringVar(&c.Epoch, "epoch", def.Epoch.Format(time.RFC3339), "start of ID time, RFC 3339")
	fs.IntVar(&c.Layout.IDBits, "id-bits", def.IDBits, "bits an ID uses, 40..63 (53: JavaScript reads the IDs exactly); without widths, they are picked to fit")
	fs.StringVar(&c.TimeUnit, "time-unit", "1ms", "what the time bits count: 1ms, 10ms or 1s (default 1ms for 63 --id-bits, else picked to fit: 10ms for 53)")
	fs.IntVar(&c.Layout.TimeBits, "time-bits", def.TimeBits, "bits of time units since the epoch")
	fs.IntVar(&c.Layout.WorkerBits, "worker-bits", def.WorkerBits, "bits of worker ID")
	fs.IntVar(&c.Layout.SeqBits, "seq-bits", def.SeqBits, "bits of per-time-unit field (sequence and gene)")
	fs.IntVar(&c.Layout.GeneBits, "gene-bits", def.GeneBits, "low bits of the field holding the shard gene")
	fs.StringVar(&c.ReservedWorkers, "reserved-workers", "", "worker IDs no node takes, for legacy snowflake generators still running beside the cluster: IDs and ranges, \"0-15,100\"; part of the layout, fixed at bootstrap (see docs/migrating.md)")
	fs.Int64Var(&c.AboveID, "above-id", 0, "refuse to start unless the layout's IDs sort above this one now: the largest ID a legacy generator issued (0: no check)")
	fs.DurationVar(&c.Window, "window", 3*time.Second, "how far ahead the high-water time is reserved on disk")
	fs.DurationVar(&c.MaxBorrow, "max-borrow", time.Second, "how far IDs may run ahead of a clock that is behind")
	fs.StringVar(&c.RequirePass, "requirepass", "", "password clients must AUTH with (and the cluster secret, without --cluster-secret)")
	fs.StringVar(&c.ClusterSecret, "cluster-secret", "", "secret every node proves it knows, by HMAC challenge-response, on each connection to the Raft port (default: --requirepass); the same on every node")
	fs.StringVar(&c.ProtectedMode, "protected-mode", "yes", "yes: refuse to start bound to a non-loopback address with neither --cluster-secret nor --requirepass; no: start anyway")
	fs.IntVar(&c.MaxBulk, "max-bulk", resp.DefaultLimits().MaxBulk, "largest bulk string a client may send, bytes")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json (log/slog on stderr)")
	fs.IntVar(&c.MaxClients, "maxclients", 10000, "most client connections at once")
	fs.IntVar(&c.ClientOutputLimit, "client-output-limit", resp.DefaultClientOutputLimit, "most reply bytes held for a client: past it they are written before the command goes on")
	fs.DurationVar(&c.ClientOutputTimeout, "client-output-timeout", resp.DefaultClientOutputTimeout, "a client that takes none of a write of its replies for this long (at most twice it) is closed")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate: serve RESP (and Raft) over TLS")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "PEM CA bundle the nodes' certificates are verified against, both ways on the Raft port (default: the certificates in --tls-cert, for one self-signed certificate shared by every node)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "host:port to serve Prometheus /metrics and /healthz on")
	fs.IntVar(&c.Voters, "voters", cluster.DefaultVoters, "most Raft voters (odd); every other member is a non-voter that serves clients the same")
	fs.IntVar(&c.MaxTags, "max-tags", defaultMaxTags, "most tags in the cluster: past it a new tag is refused and existing tags keep working (0: no bound); the leader's value holds cluster-wide, so give every node the same")
	fs.DurationVar(&c.DeadAfter, "dead-member-after", cluster.DefaultDeadMemberAfter,
		"a member the leader has not heard from for this long is removed, as CLUSTER FORGET does (0: never)")
	fs.Uint64Var(&c.SnapshotThreshold, "raft-snapshot-threshold", 0, "Raft log entries past the last snapshot that make the next one; half as many stay in the log after it (0: Raft's 8192, 10240 kept)")
	fs.DurationVar(&c.SnapshotInterval, "raft-snapshot-interval", 0, "how often Raft checks --raft-snapshot-threshold, at a random time between it and twice it (0: 10s)")
	fs.StringVar(&c.Zone, "zone", "", "failure domain of this node (a rack, zone or region): voters are spread over zones")
	fs.Float64Var(&c.RaftTimeoutScale, "raft-timeout-scale", 1, fmt.Sprintf("multiplies every Raft timing (heartbeat and election %v, leader lease, commit) and the apply, forward and request timeouts derived from them; 1 to %d, the same on every node (raise it on a loaded machine: see docs/operations.md)", cluster.BaseElection, cluster.MaxTimeoutScale))
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
	fs.StringVar(&c.ClusterMode, "cluster-mode", "off", "off, or emulated: answer Redis Cluster's CLUSTER SLOTS, SHARDS, NODES (each node the master of every slot) so that cluster clients connect (see docs/clients.md)")
	fs.StringVar(&c.SentinelMasters, "sentinel-masters", resp.DefaultSentinelMaster, "comma-separated master names SENTINEL MASTERS lists, for Sentinel clients that look their name up there (redis-py); SENTINEL GET-MASTER-ADDR-BY-NAME takes any name")
	fs.BoolVar(&c.EnableDebug, "enable-debug-command", false, "answer DEBUG CLOCK, which steps the clock IDs are issued on (fault tests only)")
	fs.StringVar(&c.PublicKey, "public-key", "", "public-ID key, 64 hex digits (AES-256), the same on every node; default: one the cluster makes at bootstrap and replicates")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(usage, "Usage: idserver [flags]\n       idserver backup --from host:port DIR\n       idserver restore DIR --dir DIR\n       idserver status --addr host:port [--json]\n       idserver import --from SOURCE --to host:port[,...] (docs/migrating.md)\n\n"+
				"Serves snowflake and gene IDs over the Redis protocol. Each flag is also read from\n"+
				"IDSERVER_<NAME> in the environment (--log-level: IDSERVER_LOG_LEVEL).\n\nFlags:\n")
			fs.SetOutput(usage)
			fs.PrintDefaults()
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "IDSERVER_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && !given[f.Name] && envErr == nil {
			if serviceLink(v) {
				c.envIgnored = append(c.envIgnored, fmt.Sprintf("%s=%q is ignored: it is a Kubernetes service link "+
					"(a Service named idserver in the namespace), not a value for --%s; set enableServiceLinks: false in the pod spec", name, v, f.Name))
				return
			}
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "time-bits", "worker-bits", "seq-bits", "gene-bits":
			c.widthsGiven = true
		case "time-unit":
			c.unitGiven = true
		}
	})
	return c, envErr
}

// serviceLink reports whether v is what Kubernetes puts in <SERVICE>_PORT
// and <SERVICE>_PORT_<port>_<PROTO> for every Service of the namespace
// (tcp://10.96.0.9:6380): a Service named idserver makes IDSERVER_PORT one,
// where --port is read from. No flag of idserver takes such a value.
func serviceLink(v string) bool {
	for _, scheme := range []string{"tcp://", "udp://", "sctp://"} {
		if strings.HasPrefix(v, scheme) {
			return true
		}
	}
	return false
}

// Validate checks the values together and fills the derived ones.
// minDeadAfter is the shortest --dead-member-after but 0: a few autopilot
// rounds (a second each by default), so that a member that is busy or still
// catching up as it joins is not taken for dead.
const minDeadAfter = 2 * time.Second

func (c *Config) Validate() error {
	epoch, err := time.Parse(time.RFC3339Nano, c.Epoch)
	if err != nil {
		return fmt.Errorf("--epoch: %v", err)
	}
	if epoch.Nanosecond()%int(time.Millisecond) != 0 { // not UnixNano: it overflows after 2262
		return errors.New("--epoch must be a whole millisecond")
	}
	if err := c.pickLayout(); err != nil {
		return err
	}
	c.Layout.Epoch = epoch.UTC()
	reserved, err := engine.ParseWorkerRanges(c.ReservedWorkers)
	if err != nil {
		return fmt.Errorf("--reserved-workers %v", err)
	}
	c.Layout.Reserved = engine.FormatWorkerRanges(reserved)
	if err := c.Layout.Validate(); err != nil {
		return err
	}
	now := time.Now()
	if err := c.Layout.CheckAt(now); err != nil {
		return err
	}
	if c.AboveID != 0 {
		if err := c.Layout.CheckAbove(c.AboveID, now); err != nil {
			return err
		}
	}
	switch {
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("--port %d is not a TCP port", c.Port)
	case c.SegmentStep < 1 || c.SegmentStep > 1_000_000:
		return fmt.Errorf("--segment-step %d must be between 1 and 1000000", c.SegmentStep)
	case c.Window < 10*time.Millisecond:
		return fmt.Errorf("--window %v is too short (at least 10ms)", c.Window)
	case c.WorkerLease < time.Second || c.WorkerLease > time.Hour:
		return fmt.Errorf("--worker-lease %v must be between 1s and 1h", c.WorkerLease)
	case c.RecoverSkip < 1:
		return errors.New("--recover-skip must be at least 1")
	case c.MaxBorrow < 0:
		return errors.New("--max-borrow must not be negative")
	case c.MaxBorrow%c.Layout.Unit != 0:
		return fmt.Errorf("--max-borrow %v is not a whole number of --time-unit %v", c.MaxBorrow, c.Layout.Unit)
	case c.Window < 2*c.Layout.Unit:
		return fmt.Errorf("--window %v is shorter than two --time-unit %v", c.Window, c.Layout.Unit)
	case c.WorkerLease < 4*c.Layout.Unit:
		return fmt.Errorf("--worker-lease %v is shorter than four --time-unit %v", c.WorkerLease, c.Layout.Unit)
	case c.MaxBulk < 1024 || c.MaxBulk > 512<<20:
		return fmt.Errorf("--max-bulk %d must be between 1024 and %d", c.MaxBulk, 512<<20)
	case c.Dir == "":
		return errors.New("--dir must not be empty")
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("--log-format %q: text or json", c.LogFormat)
	case c.MaxClients < 1:
		return fmt.Errorf("--maxclients %d must be at least 1", c.MaxClients)
	case c.ClientOutputLimit < 1024 || c.ClientOutputLimit > 1<<30:
		return fmt.Errorf("--client-output-limit %d must be between 1024 and %d", c.ClientOutputLimit, 1<<30)
	case c.ClientOutputTimeout < 100*time.Millisecond:
		return fmt.Errorf("--client-output-timeout %v is too short (at least 100ms)", c.ClientOutputTimeout)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case c.TLSCA != "" && c.TLSCert == "":
		return errors.New("--tls-ca goes with --tls-cert and --tls-key")
	case c.ProtectedMode != "yes" && c.ProtectedMode != "no":
		return fmt.Errorf("--protected-mode %q: yes or no", c.ProtectedMode)
	case c.ClusterMode != "off" && c.ClusterMode != "emulated":
		return fmt.Errorf("--cluster-mode %q: off or emulated", c.ClusterMode)
	case c.MaxTags < 0:
		return fmt.Errorf("--max-tags %d: 0 (no bound) or more", c.MaxTags)
	case c.Voters < 1:
		return fmt.Errorf("--voters %d must be at least 1 (odd: 1, 3, 5, 7)", c.Voters)
	case c.DeadAfter < 0 || c.DeadAfter > 0 && c.DeadAfter < minDeadAfter:
		// Below a few autopilot rounds a healthy member that is busy, or
		// still joining, counts as dead and is removed.
		return fmt.Errorf("--dead-member-after %v: 0 (never remove a member) or at least %v", c.DeadAfter, minDeadAfter)
	case c.SnapshotInterval < 0 || c.SnapshotInterval > 0 && c.SnapshotInterval < 5*time.Millisecond:
		// Raft refuses an interval under 5ms.
		return fmt.Errorf("--raft-snapshot-interval %v: 0 (10s), or 5ms or more", c.SnapshotInterval)
	case !(c.RaftTimeoutScale >= 1 && c.RaftTimeoutScale <= cluster.MaxTimeoutScale):
		return fmt.Errorf("--raft-timeout-scale %v must be between 1 and %d", c.RaftTimeoutScale, cluster.MaxTimeoutScale)
	case len(c.Zone) > 64 || strings.ContainsAny(c.Zone, ",= \t\r\n"):
		return fmt.Errorf("--zone %q: at most 64 characters, no spaces, commas or '='", c.Zone)
	}
	if c.PublicKey != "" {
		if c.PublicKeyBytes, err = engine.ParsePublicKey(c.PublicKey); err != nil {
			return fmt.Errorf("--public-key: %v", err)
		}
	}
	if c.RaftAddr == "" {
		port := 0
		if c.Port != 0 {
			port = c.Port + 10000
		}
		if port > 65535 {
			return fmt.Errorf("--port %d leaves no room for the default --raft-addr (port+10000); set --raft-addr", c.Port)
		}
		c.RaftAddr = net.JoinHostPort(c.Bind, strconv.Itoa(port))
	}
	if err := c.checkProtectedMode(); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	return nil
}

// warnings are settings that start but deserve a word in the log.
func (c *Config) warnings() []string {
	out := append([]string(nil), c.envIgnored...)
	if c.Voters%2 == 0 {
		voters := fmt.Sprintf("%d voters", c.Voters-1)
		if c.Voters == 2 {
			voters = "one voter"
		}
		out = append(out, fmt.Sprintf("--voters %d is even: autopilot keeps at most %s (an even count tolerates no more failures than one fewer)",
			c.Voters, voters))
	}
	if election := cluster.TimingFor(c.RaftTimeoutScale).Election; c.WorkerLease < 4*election {
		out = append(out, fmt.Sprintf("--worker-lease %v is shorter than four election timeouts (%v at --raft-timeout-scale %v): "+
			"a node may stop issuing IDs while its cluster elects a leader", c.WorkerLease, election, c.RaftTimeoutScale))
	}
	return out
}

// checkProtectedMode refuses, as Redis's protected mode does, a node that
// listens beyond loopback with no secret at all: anyone who reaches it
// could take IDs, or talk Raft to it. Metrics beyond loopback need
// --requirepass, which /metrics then asks for.
func (c *Config) checkProtectedMode() error {
	if c.ProtectedMode == "no" {
		return nil
	}
	if c.MetricsAddr != "" && c.RequirePass == "" {
		host, _, err := net.SplitHostPort(c.MetricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %q: %v", c.MetricsAddr, err)
		}
		if !loopback(host) {
			return fmt.Errorf("protected mode: --metrics-addr %q is not a loopback address and no --requirepass is set, so anyone who "+
				"reaches it could read this node's metrics; set --requirepass (/metrics then asks for it as HTTP basic auth), "+
				"or serve metrics on 127.0.0.1, or, if the network is trusted, start with --protected-mode no", host)
		}
	}
	if c.ClusterSecret != "" || c.RequirePass != "" {
		return nil
	}
	raftHost, _, err := net.SplitHostPort(c.RaftAddr)
	if err != nil {
		return fmt.Errorf("--raft-addr %q: %v", c.RaftAddr, err)
	}
	for _, a := range []struct{ flag, host string }{{"--bind", c.Bind}, {"--raft-addr", raftHost}} {
		if !loopback(a.host) {
			return fmt.Errorf("protected mode: %s %q is not a loopback address and no secret is set, so anyone who reaches this node could "+
				"take IDs from it or send it Raft traffic; set --cluster-secret and --requirepass (the same on every node), "+
				"or bind to 127.0.0.1, or, if the network is trusted, start with --protected-mode no", a.flag, a.host)
		}
	}
	return nil
}

// loopback says whether host is a loopback address or "localhost". A name
// is not looked up: it counts as beyond loopback.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pickLayout reads --id-bits and --time-unit and, when no width was given
// and they are not the default 63 bits of milliseconds, picks the widths
// (engine.AutoLayout), and the unit too when it was not given
// (engine.AutoUnit: 10ms for 53 bits).
func (c *Config) pickLayout() error {
	if c.Layout.IDBits < engine.MinIDBits || c.Layout.IDBits > engine.MaxIDBits {
		return fmt.Errorf("--id-bits %d must be between %d and %d", c.Layout.IDBits, engine.MinIDBits, engine.MaxIDBits)
	}
	unit, err := time.ParseDuration(c.TimeUnit)
	if err != nil || !slices.Contains(engine.Units, unit) {
		return fmt.Errorf("--time-unit %q: 1ms, 10ms or 1s", c.TimeUnit)
	}
	if !c.unitGiven && !c.widthsGiven {
		unit = engine.AutoUnit(c.Layout.IDBits)
	}
	c.Layout.Unit = unit
	if c.widthsGiven {
		return nil
	}
	auto, err := engine.AutoLayout(c.Layout.IDBits, unit)
	if err != nil {
		return err
	}
	c.Layout = auto
	return nil
}

func (c *Config) level() slog.Level {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(c.LogLevel))
	return lvl
}

// sentinelMasterNames is --sentinel-masters as a list, blanks dropped.
func (c *Config) sentinelMasterNames() []string {
	var names []string
	for _, n := range strings.Split(c.SentinelMasters, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// defaultMaxTags is --max-tags when not given: the bound a cluster keeps
// without committing one.
const defaultMaxTags = cluster.DefaultMaxTags
