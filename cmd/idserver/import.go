package main

// idserver import: counters from a running Redis, a PostgreSQL sequence or
// a Leaf table land in idserver as floors (package importer).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/importer"
)

// Exit codes of idserver import beside 0 (every key imported), 1 (the
// source or idserver failed; a rerun finishes) and 2 (usage).
const (
	exitRefused = 3 // some keys were refused, each named; the rest are imported
	exitBelow   = 4 // --verify found a key idserver would hand out again
)

// runImport: idserver import --from URL [--match P] [--to host:port,...]
// [--margin N] [--verify] ... It returns the exit code.
func runImport(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idserver import", flag.ContinueOnError)
	from := fs.String("from", "", "the source: redis://host:port[/db], postgres://user:password@host:port/db, mysql://user:password@host:port/db")
	match := fs.String("match", "*", "which keys, sequences or tags: a Redis SCAN MATCH pattern (a glob for postgres and mysql)")
	to := fs.String("to", "127.0.0.1:6380", "RESP address of idserver members, comma-separated: a failed write goes to the next")
	pass := fs.String("password", getenv("IDSERVER_REQUIREPASS"), "idserver's --requirepass")
	margin := fs.Int64("margin", 0, "add N to every value: room for what the old writers hand out while a live pass runs")
	timeout := fs.Duration("timeout", time.Minute, "how long a batch is tried again (a member down, an election) before the import gives up")
	rate := fs.Int("rate", 0, "read at most N counters per second from the source (0: no cap)")
	conns := fs.Int("conns", 4, "connections writing to idserver")
	batch := fs.Int("batch", importer.MaxBatch, fmt.Sprintf("floors per MSET, one Raft entry (at most %d)", importer.MaxBatch))
	verify := fs.Bool("verify", false, "import nothing: print, per key, the source's value and idserver's next, and exit 4 when a next is not above its source")
	table := fs.String("table", "leaf_alloc", "mysql: the table shaped like Leaf's leaf_alloc")
	tagColumn := fs.String("tag-column", "biz_tag", "mysql: the column holding the tag")
	maxColumn := fs.String("max-column", "max_id", "mysql: the column holding the highest value handed out")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: idserver import --from URL [--match PATTERN] [--to host:port,...] [--margin N] [--verify] [flags]\n"+
			"exits 0 when every key is imported, 1 when the source or idserver failed (a rerun finishes the job),\n"+
			"2 on a usage error (a --to that is not idserver among them), 3 when some keys were refused (each named; the rest are imported),\n"+
			"4 when --verify found a key whose next idserver value is not above the source's (--verify changes nothing)")
		fs.PrintDefaults()
	}
	if code, done := parseSubcommand(fs, args, stdout, stderr); done {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "idserver import: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q", fs.Arg(0))
	case *from == "":
		return usage("--from is required (redis://, postgres:// or mysql://)")
	case *margin < 0:
		return usage("--margin %d: 0 or more expected", *margin)
	case *timeout <= 0:
		return usage("--timeout %v: more than 0 expected", *timeout)
	case *rate < 0 || *conns <= 0 || *batch <= 0 || *batch > importer.MaxBatch:
		return usage("--rate 0 or more, --conns 1 or more, --batch 1 to %d expected", importer.MaxBatch)
	}
	addrs := strings.Split(*to, ",")
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return usage("--to %q: host:port expected", a)
		}
	}
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	src, err := openSource(ctx, *from, *match, importer.LeafTable{Table: *table, TagColumn: *tagColumn, MaxColumn: *maxColumn})
	if err != nil {
		fmt.Fprintf(stderr, "idserver import: %v\n", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	defer src.Close()
	opts := importer.Options{To: addrs, Password: *pass, Margin: *margin, Timeout: *timeout, Rate: *rate, Conns: *conns, Batch: *batch}
	if isTerminal(stderr) {
		opts.Progress = stderr
	}
	if *verify {
		v, err := importer.Verify(ctx, src, opts, stdout)
		if err != nil {
			fmt.Fprintf(stderr, "idserver import --verify: %v\n", err)
			if errors.Is(err, importer.ErrNotIdserver) {
				return 2
			}
			return 1
		}
		fmt.Fprintf(stderr, "idserver import --verify: %s: %d keys checked, %d below the source, %d refused\n", src.Name(), v.Checked, v.Below, v.Refused)
		switch {
		case v.Below > 0:
			return exitBelow
		case v.Refused > 0:
			return exitRefused
		}
		return 0
	}
	start := time.Now()
	res, err := importer.Run(ctx, src, opts)
	for _, r := range res.Refused {
		fmt.Fprintf(stderr, "idserver import: refused %s\n", r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idserver import: %v\n", err)
		if errors.Is(err, importer.ErrNotIdserver) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stderr, "idserver import: %s: %d read, %d imported, %d refused in %v\n",
		src.Name(), res.Read, res.Imported, len(res.Refused), time.Since(start).Round(time.Millisecond))
	if len(res.Refused) > 0 {
		return exitRefused
	}
	return 0
}

// errUsage marks a --from that names no source idserver import knows.
var errUsage = errors.New("usage")

// openSource opens the source that from names.
func openSource(ctx context.Context, from, match string, t importer.LeafTable) (importer.Source, error) {
	scheme, _, _ := strings.Cut(from, "://")
	switch scheme {
	case "redis", "rediss":
		return importer.NewRedisSource(from, match)
	case "postgres", "postgresql":
		return importer.NewPostgresSource(ctx, from, match)
	case "mysql", "mariadb":
		return importer.NewMySQLSource(ctx, from, t, match)
	}
	return nil, fmt.Errorf("%w: --from %q: redis://, postgres:// or mysql:// expected", errUsage, scheme+"://")
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
