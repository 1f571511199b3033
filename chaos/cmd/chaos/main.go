// Command chaos runs a randomized fault campaign against idserver processes
// on loopback for as long as asked and prints what it injected, what it
// checked and what it found.
//
//	go run ./chaos/cmd/chaos -duration 30m -seed 42
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"idserver/chaos"
)

func main() {
	duration := flag.Duration("duration", time.Minute, "length of the fault schedule (setup, heal and check come on top)")
	seed := flag.Uint64("seed", 0, "seed of the schedule (0: a random one, printed)")
	nodes := flag.Int("nodes", 3, "cluster size at the start, and the fewest nodes it is scaled down to")
	maxNodes := flag.Int("max-nodes", 5, "the most nodes it is scaled up to")
	dead := flag.Duration("dead-member-after", 12*time.Second, "every node's --dead-member-after (its --worker-lease is a third of it)")
	clients := flag.Int("clients", 2, "clients per node")
	manyTags := flag.Int("many-tags", 20000, "cold tags touched besides the campaign's few (at most 200000; a seventh with names of random bytes)")
	faults := flag.String("faults", "", "comma-separated fault kinds (default all): "+strings.Join(chaos.AllFaults, ","))
	cover := flag.String("cover", "", "comma-separated fault kinds the schedule starts with, one of each")
	binary := flag.String("binary", "", "idserver binary to test (default: build ./cmd/idserver)")
	dir := flag.String("dir", "", "work directory, kept (default: a temporary one, removed when nothing is found)")
	strict := flag.Bool("lazyfs-strict", false, "power cuts: a name is durable only once its directory is fsynced (default: at any fsync, as ext4)")
	porcupine := flag.Duration("porcupine-timeout", 2*time.Minute, "linearizability check budget per tag")
	flag.Parse()
	// The history grows by about 300 bytes an operation (a 10-minute run
	// holds 3.4 million); collect sooner so the heap stays near its live size.
	debug.SetGCPercent(30)
	if *seed == 0 {
		*seed = rand.Uint64() >> 1
	}
	cfg := chaos.Config{Seed: *seed, Duration: *duration, Nodes: *nodes, MaxNodes: *maxNodes, DeadMemberAfter: *dead, ClientsPerNode: *clients, ManyTags: *manyTags, Binary: *binary, Dir: *dir,
		PorcupineTimeout: *porcupine, StrictDirs: *strict,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
		}}
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	}
	if *cover != "" {
		cfg.Cover = strings.Split(*cover, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := chaos.Run(ctx, cfg)
	if res != nil && res.Verdict != nil {
		res.Table(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if len(res.Verdict.Anomalies) > 0 {
		fmt.Printf("\nhistory and logs kept in %s\n", res.Dir)
		os.Exit(1)
	}
}
