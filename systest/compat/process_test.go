package compat

// Tests against the real binary, started as a process on 127.0.0.1.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"idserver/engine"
	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestKillNineUnderLoadNeverRepeats: a client issues IDs while the server
// is killed with SIGKILL and restarted, again and again. Every ID any
// client was answered with is unique, and one client's NEXTIDs strictly
// increase across all the restarts.
func TestKillNineUnderLoadNeverRepeats(t *testing.T) {
	const cycles = 20
	dir := t.TempDir()
	seen := map[int64]struct{}{}
	var last int64
	total := 0
	for cycle := range cycles {
		p := systest.StartProc(t, dir)
		ctx := context.Background()
		seq, genes := p.Client(), p.Client()
		var wg sync.WaitGroup
		var nextIDs, geneIDs []int64
		wg.Add(2)
		go func() { // strictly increasing stream: NEXTID and NEXTID 50
			defer wg.Done()
			for i := 0; ; i++ {
				if i%2 == 0 {
					id, err := seq.Do(ctx, "NEXTID").Int64()
					if err != nil {
						return
					}
					nextIDs = append(nextIDs, id)
				} else {
					ids, err := seq.Do(ctx, "NEXTID", 50).Int64Slice()
					if err != nil {
						return
					}
					nextIDs = append(nextIDs, ids...)
				}
			}
		}()
		go func() { // gene IDs of random buyers
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(cycle), 9))
			for {
				ids, err := genes.Do(ctx, "GENEID", r.Int64N(1e9), 1+r.IntN(20)).Int64Slice()
				if err != nil {
					return
				}
				geneIDs = append(geneIDs, ids...)
			}
		}()
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		p.Kill()
		wg.Wait()
		if len(nextIDs) == 0 || len(geneIDs) == 0 {
			t.Fatalf("cycle %d: no IDs issued before the kill", cycle)
		}
		for _, id := range nextIDs {
			if id <= last {
				t.Fatalf("cycle %d: NEXTID %d not above %d issued before", cycle, id, last)
			}
			last = id
		}
		for _, id := range append(nextIDs, geneIDs...) {
			if _, dup := seen[id]; dup {
				t.Fatalf("cycle %d: duplicate ID %d", cycle, id)
			}
			seen[id] = struct{}{}
		}
		total += len(nextIDs) + len(geneIDs)
	}
	t.Logf("%d SIGKILL cycles under load, %d IDs, no repeat, NEXTID strictly increasing", cycles, total)
}

func TestSecondProcessOnSameDirExits(t *testing.T) {
	dir := t.TempDir()
	systest.StartProc(t, dir)
	code, out := systest.RunToExit(t, "--port", systest.FreePort(t), "--dir", dir)
	if code != 1 || !strings.Contains(out, "in use by another process") || !strings.Contains(out, dir) {
		t.Fatalf("second process: exit %d, output:\n%s", code, out)
	}
}

func TestChangedLayoutRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	p := systest.StartProc(t, dir)
	p.Shutdown()
	code, out := systest.RunToExit(t, "--port", systest.FreePort(t), "--dir", dir, "--gene-bits", "4")
	if code != 1 || !strings.Contains(out, "gene-bits=8") || !strings.Contains(out, "gene-bits=4") {
		t.Fatalf("changed layout: exit %d, output:\n%s", code, out)
	}
	systest.StartProc(t, dir) // the stored layout still starts
}

func TestCleanShutdownAndRestart(t *testing.T) {
	dir := t.TempDir()
	p := systest.StartProc(t, dir)
	before, err := p.Client().Do(context.Background(), "NEXTID").Int64()
	if err != nil {
		t.Fatal(err)
	}
	p.Shutdown()
	if !strings.Contains(p.Log(), "msg=stopped") {
		t.Fatalf("no clean stop in the log:\n%s", p.Log())
	}
	// Configuration from the environment.
	p2, err := systest.Launch(t, dir, []string{"IDSERVER_GENE_BITS=8", "IDSERVER_MAX_BORROW=2s"})
	if err != nil {
		t.Fatal(err)
	}
	after, err := p2.Client().Do(context.Background(), "NEXTID").Int64()
	if err != nil || after <= before {
		t.Fatalf("after restart: %d, %v (before %d)", after, err, before)
	}
	parts, _ := engine.DefaultLayout().Decode(after)
	if parts.Worker != 0 {
		t.Fatalf("a single node's worker is %d, want 0 from the cluster", parts.Worker)
	}

}

func TestVersionAndBadFlags(t *testing.T) {
	if code, out := systest.RunToExit(t, "--version"); code != 0 || !strings.HasPrefix(out, "idserver ") {
		t.Fatalf("--version: %d %q", code, out)
	}
	for _, args := range [][]string{
		{"--time-bits", "40"},
		{"--gene-bits", "13"},
		{"--segment-step", "0"},
		{"--epoch", "yesterday"},
		{"--nosuchflag"},
	} {
		if code, out := systest.RunToExit(t, append(args, "--dir", t.TempDir())...); code != 2 {
			t.Errorf("%v: exit %d, want 2; output:\n%s", args, code, out)
		}
	}
	// A bad value in the environment is refused like a bad flag.
	if code, out := systest.RunToExitEnv(t, []string{"IDSERVER_TIME_BITS=40"}, "--dir", t.TempDir()); code != 2 || !strings.Contains(out, "time-bits") {
		t.Errorf("IDSERVER_TIME_BITS=40: exit %d, output:\n%s", code, out)
	}
}

func TestAdversarialFramesLeaveTheProcessServing(t *testing.T) {
	p := systest.StartProc(t, t.TempDir())
	rdb := p.Client()
	frames := []string{
		"*99999999999999\r\n",
		"*1\r\n$9223372036854775807\r\n",
		"*1\r\n$-9223372036854775808\r\n",
		"*2\r\n$6\r\nNEXTID\r\n$99999999999999999999\r\n",
		strings.Repeat("A", 1<<20),
		"*1\r\n" + strings.Repeat("$", 1<<16),
	}
	r := rand.New(rand.NewPCG(7, 7))
	for range 200 { // random junk too
		b := make([]byte, 1+r.IntN(64))
		for i := range b {
			b[i] = "*$\r\n0123456789-:abc"[r.IntN(19)]
		}
		frames = append(frames, string(b))
	}
	refused := 0
	for _, f := range frames {
		conn, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, f)
		if tcp, ok := conn.(*net.TCPConn); ok {
			tcp.CloseWrite()
		}
		out, _ := io.ReadAll(conn)
		conn.Close()
		if bytes.Contains(out, []byte("-ERR Protocol error: ")) {
			refused++
		}
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("after %q the server does not answer: %v", f[:min(len(f), 40)], err)
		}
	}
	if refused < 6 {
		t.Fatalf("only %d of %d frames refused", refused, len(frames))
	}
	select {
	case <-p.Done():
		t.Fatal("the server exited")
	default:
	}
	t.Logf("%d adversarial frames sent, %d refused with a protocol error, server still serving", len(frames), refused)
}

func TestRedisCLI(t *testing.T) {
	cli := testproc.Need(t, "redis-cli")
	p := systest.StartProc(t, t.TempDir())
	out, err := exec.Command(cli, "-p", p.Port, "NEXTID").CombinedOutput()
	if err != nil || !regexp.MustCompile(`^[1-9][0-9]{10,18}\n$`).Match(out) {
		t.Fatalf("redis-cli NEXTID: %q %v", out, err)
	}
	out, err = exec.Command(cli, "-p", p.Port, "DECODE", strings.TrimSpace(string(out))).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "worker") {
		t.Fatalf("redis-cli DECODE: %q %v", out, err)
	}
}

// TestRedisCLIInteractive drives redis-cli's prompt in a real terminal
// (tmux), the way a person uses it: hints from COMMAND DOCS, typed commands.
func TestRedisCLIInteractive(t *testing.T) {
	cli := testproc.Need(t, "redis-cli")
	tmux := testproc.Need(t, "tmux")
	p := systest.StartProc(t, t.TempDir())
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	tm := func(args ...string) string {
		cmd := exec.Command(tmux, append([]string{"-S", sock}, args...)...)
		cmd.Env = append(os.Environ(), "TERM=xterm")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	tm("new-session", "-d", "-x", "150", "-y", "60", cli+" -p "+p.Port)
	t.Cleanup(func() { exec.Command(tmux, "-S", sock, "kill-server").Run() })
	prompt := "127.0.0.1:" + p.Port + ">"
	var screen string
	// waitPrompts waits until the screen shows n prompts: keys typed while
	// redis-cli is busy are not for this test to race.
	waitPrompts := func(n int) {
		wait.For(t, 10*time.Second, fmt.Sprintf("prompt #%d", n), func() (bool, string) {
			screen = tm("capture-pane", "-p", "-t", "0")
			return strings.Count(screen, prompt) >= n, "screen:\n" + screen
		})
	}
	waitPrompts(1)
	for i, line := range []string{"NEXTID", "GENEID 42 3", "DECODE 253001380376084537", "HELLO 3", "DECODE 253001380376084537"} {
		tm("send-keys", "-t", "0", line, "Enter")
		waitPrompts(i + 2)
	}
	if strings.Count(screen, "(integer)") < 14 || !strings.Contains(screen, `"time" => "2026-11-30T03:37:09.620Z"`) ||
		strings.Contains(strings.ToLower(screen), "err") || strings.Contains(strings.ToLower(screen), "warn") {
		t.Fatalf("interactive redis-cli screen:\n%s", screen)
	}
	tm("send-keys", "-t", "0", "quit", "Enter")
}

func TestRedisBenchmark(t *testing.T) {
	bench := testproc.Need(t, "redis-benchmark")
	p := systest.StartProc(t, t.TempDir())
	out, err := exec.Command(bench, "-p", p.Port, "-n", "200000", "NEXTID").CombinedOutput()
	text := string(out)
	if err != nil || !strings.Contains(text, "requests per second") || !strings.Contains(text, "200000 requests completed") {
		t.Fatalf("redis-benchmark: %v\n%s", err, text)
	}
	for _, bad := range []string{"WARN", "ERR", "rror"} {
		if strings.Contains(text, bad) {
			t.Fatalf("redis-benchmark printed %q:\n%s", bad, text)
		}
	}
	if !strings.Contains(p.Log(), "msg=listening") || strings.Contains(p.Log(), "level=ERROR") {
		t.Fatalf("server log:\n%s", p.Log())
	}
}
