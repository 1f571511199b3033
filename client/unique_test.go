package idclient

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// helperEnv, when set, makes the test binary a client process of the
// uniqueness test: the value lists the nodes' addresses.
const helperEnv = "IDCLIENT_UNIQUE_NODES"

// helperGoroutines is the number of goroutines in each client process.
const helperGoroutines = 8

// helperPerKind is how many values of each kind one goroutine takes.
func helperPerKind() int {
	if raceEnabled {
		return 300
	}
	return 3000
}

// runUniqueHelper takes helperPerKind snowflake IDs, gene IDs and counter
// values in each of 8 goroutines through one Client on every node, and
// prints them one a line ("id N", "gene N", "seg N").
func runUniqueHelper() int {
	c, err := New(Options{Addrs: strings.Split(os.Getenv(helperEnv), ","), Buffer: Buffer{Batch: 64}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := false
	for g := range helperGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			lines := make([]string, 0, 3*helperPerKind())
			ctr := c.Counter("unique")
			for i := range helperPerKind() {
				id, err1 := c.Next(ctx)
				gene, err2 := c.Gene(ctx, strconv.Itoa(g*helperPerKind()+i))
				seg, err3 := ctr.Next(ctx)
				if err := cmpOr(err1, err2, err3); err != nil {
					fmt.Fprintf(os.Stderr, "goroutine %d, value %d: %v (NEXTID %v, GENEID %v, NEXTSEG %v)\n", g, i, err, err1, err2, err3)
					mu.Lock()
					failed = true
					mu.Unlock()
					return
				}
				lines = append(lines, "id "+strconv.FormatInt(id, 10), "gene "+strconv.FormatInt(gene, 10), "seg "+strconv.FormatInt(seg, 10))
			}
			mu.Lock()
			for _, l := range lines {
				out.WriteString(l + "\n")
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed {
		return 1
	}
	return 0
}

func cmpOr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestEightProcessesNeverRepeat: 8 client processes, each with 8
// goroutines on one Client over all three members of a cluster, take
// snowflake IDs, gene IDs and counter values; every value is collected
// and none comes out twice (snowflake and gene IDs share one space).
func TestEightProcessesNeverRepeat(t *testing.T) {
	nodes := startCluster(t, 3)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const procs = 8
	type result struct {
		out    []byte
		stderr strings.Builder
		err    error
	}
	results := make([]result, procs)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each process lists the nodes starting at another one, so
			// that all three serve.
			addrs := addrsOf(nodes)
			addrs = append(addrs[i%3:], addrs[:i%3]...)
			cmd := exec.Command(self, "-test.run", "^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(addrs, ","))
			cmd.Stderr = &results[i].stderr
			results[i].out, results[i].err = cmd.Output()
		}()
	}
	wg.Wait()
	ids := map[int64]int{}
	segs := map[int64]int{}
	want := procs * helperGoroutines * helperPerKind()
	for i := range results {
		r := &results[i]
		if r.err != nil {
			t.Fatalf("client process %d: %v\n%s", i, r.err, r.stderr.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(string(r.out)), "\n") {
			kind, num, _ := strings.Cut(line, " ")
			v, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				t.Fatalf("process %d printed %q", i, line)
			}
			m := ids
			if kind == "seg" {
				m = segs
			}
			if prev, ok := m[v]; ok {
				t.Fatalf("%s %d from process %d was also given to process %d", kind, v, i, prev)
			}
			m[v] = i
		}
	}
	if len(ids) != 2*want || len(segs) != want {
		t.Fatalf("collected %d IDs and %d segment values, want %d and %d", len(ids), len(segs), 2*want, want)
	}
	t.Logf("%d processes x %d goroutines: %d snowflake and gene IDs, %d counter values, all distinct, in %v",
		procs, helperGoroutines, len(ids), len(segs), time.Since(start).Round(time.Millisecond))
}
