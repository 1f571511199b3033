package importer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// fakeIdserver answers MSET and GET as idserver does, over a real socket:
// floors only raise. failFirst MSETs are answered TRYAGAIN first.
type fakeIdserver struct {
	mu        sync.Mutex
	floors    map[string]int64
	msets     int
	failFirst int
	addr      string
	// plainRedis: INFO without idserver's line, as a Redis answers it.
	plainRedis bool
}

func startFake(t *testing.T, failFirst int) *fakeIdserver {
	t.Helper()
	f := &fakeIdserver{floors: map[string]int64{}, failFirst: failFirst}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		redcon.Serve(ln, f.handle, nil, nil)
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return f
}

func (f *fakeIdserver) handle(conn redcon.Conn, cmd redcon.Command) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch strings.ToUpper(string(cmd.Args[0])) {
	case "MSET":
		f.msets++
		if f.msets <= f.failFirst {
			conn.WriteError("TRYAGAIN no leader reachable for this request; try again")
			return
		}
		for i := 1; i+1 < len(cmd.Args); i += 2 {
			v, _ := strconv.ParseInt(string(cmd.Args[i+1]), 10, 64)
			f.floors[string(cmd.Args[i])] = max(f.floors[string(cmd.Args[i])], v)
		}
		conn.WriteString("OK")
	case "INFO":
		if f.plainRedis {
			conn.WriteBulkString("# Server\r\nredis_version:7.0.15\r\n")
			return
		}
		conn.WriteBulkString("# Server\r\nredis_version:7.0.15\r\nidserver_version:test\r\n")
	case "GET":
		v, ok := f.floors[string(cmd.Args[1])]
		if !ok {
			conn.WriteNull()
			return
		}
		conn.WriteBulkString(strconv.FormatInt(v, 10))
	default:
		conn.WriteError("ERR unknown command")
	}
}

func (f *fakeIdserver) floor(key string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.floors[key]
	return v, ok
}

// sliceSource is a Source over counters in memory.
type sliceSource []Counter

func (s sliceSource) Name() string                    { return "slice" }
func (s sliceSource) Total(ctx context.Context) int64 { return int64(len(s)) }
func (s sliceSource) Close() error                    { return nil }
func (s sliceSource) Read(ctx context.Context, n int, emit func([]Counter) error) error {
	for i := 0; i < len(s); i += n {
		batch := append([]Counter(nil), s[i:min(i+n, len(s))]...)
		if err := emit(batch); err != nil {
			return err
		}
	}
	return nil
}

func counters(n int) sliceSource {
	s := make(sliceSource, n)
	for i := range s {
		s[i] = Counter{Key: "k" + strconv.Itoa(i), Value: int64(i) * 10}
	}
	return s
}

func TestRunLandsFloorsWithMarginAndRefusesKeyByKey(t *testing.T) {
	f := startFake(t, 0)
	src := append(counters(1200),
		Counter{Key: "bad", Refused: `value "x" is not an integer`},
		Counter{Key: "", Value: 5},
		Counter{Key: strings.Repeat("a", MaxKey+1), Value: 5},
		Counter{Key: "edge", Value: 9223372036854775000})
	res, err := Run(context.Background(), src, Options{To: []string{f.addr}, Margin: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Read != int64(len(src)) || res.Imported != 1200 || len(res.Refused) != 4 {
		t.Fatalf("read %d, imported %d, refused %v", res.Read, res.Imported, res.Refused)
	}
	for _, want := range []string{`"bad": value "x" is not an integer`, `"": a tag is 1 to 256 bytes`, "is 257", `"edge": value 9223372036854775000 plus --margin 1000`} {
		found := false
		for _, r := range res.Refused {
			found = found || strings.Contains(r.String(), want)
		}
		if !found {
			t.Errorf("no refusal says %q: %v", want, res.Refused)
		}
	}
	for _, c := range src[:1200] {
		if v, ok := f.floor(c.Key); !ok || v != c.Value+1000 {
			t.Fatalf("%s: floor %d (%v), want %d", c.Key, v, ok, c.Value+1000)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.msets != 3 {
		t.Errorf("%d MSETs for 1200 floors, want 3 of at most %d", f.msets, MaxBatch)
	}
}

func TestRunTriesARefusedBatchAgain(t *testing.T) {
	f := startFake(t, 5)
	res, err := Run(context.Background(), counters(3000), Options{To: []string{f.addr}, Timeout: 10 * time.Second})
	if err != nil || res.Imported != 3000 {
		t.Fatalf("imported %d, %v", res.Imported, err)
	}
}

func TestRunGivesUpAfterTimeoutSayingWhatLanded(t *testing.T) {
	f := startFake(t, 1<<30)
	start := time.Now()
	res, err := Run(context.Background(), counters(100), Options{To: []string{f.addr}, Timeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrWrite) || !strings.Contains(err.Error(), "TRYAGAIN") || !strings.Contains(err.Error(), "0 floors landed") {
		t.Fatalf("err %v", err)
	}
	if res.Imported != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("imported %d after %v", res.Imported, time.Since(start))
	}
}

func TestRunNeverCountsABatchSentNowhere(t *testing.T) {
	f := startFake(t, 0)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	nowhere := ln.Addr().String()
	ln.Close()
	res, err := Run(context.Background(), counters(2000), Options{To: []string{nowhere, f.addr}, Timeout: 10 * time.Second})
	if err != nil || res.Imported != 2000 {
		t.Fatalf("imported %d, %v", res.Imported, err)
	}
	for _, c := range counters(2000) {
		if _, ok := f.floor(c.Key); !ok {
			t.Fatalf("%s counted as landed, never sent", c.Key)
		}
	}
}

// TestRunAndVerifyRefuseATargetThatIsNotIdserver: a --to that answers as
// a plain Redis (the source given twice, say) takes MSETs too; the import
// and --verify refuse it before a floor is written.
func TestRunAndVerifyRefuseATargetThatIsNotIdserver(t *testing.T) {
	f := startFake(t, 0)
	f.plainRedis = true
	if _, err := Run(context.Background(), counters(10), Options{To: []string{f.addr}}); !errors.Is(err, ErrNotIdserver) {
		t.Fatalf("Run: %v, want ErrNotIdserver", err)
	}
	if _, err := Verify(context.Background(), counters(10), Options{To: []string{f.addr}}, io.Discard); !errors.Is(err, ErrNotIdserver) {
		t.Fatalf("Verify: %v, want ErrNotIdserver", err)
	}
	if f.msets != 0 || len(f.floors) != 0 {
		t.Fatalf("%d MSETs reached the plain Redis", f.msets)
	}
}

func TestRunKeepsToRate(t *testing.T) {
	f := startFake(t, 0)
	start := time.Now()
	if _, err := Run(context.Background(), counters(600), Options{To: []string{f.addr}, Rate: 1000, Batch: 100}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Fatalf("600 counters at --rate 1000 took %v", took)
	}
}

func TestVerifyMarksKeysBelow(t *testing.T) {
	f := startFake(t, 0)
	f.mu.Lock()
	f.floors["held"], f.floors["behind"], f.floors["top"] = 100, 50, math.MaxInt64
	f.mu.Unlock()
	src := sliceSource{{Key: "held", Value: 100}, {Key: "behind", Value: 60}, {Key: "absent", Value: 1}, {Key: "zero", Value: 0},
		{Key: "top", Value: math.MaxInt64},
		{Key: "bad", Refused: "not an integer"}}
	var out bytes.Buffer
	res, err := Verify(context.Background(), src, Options{To: []string{f.addr}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checked != 5 || res.Below != 2 || res.Refused != 1 {
		t.Fatalf("%+v:\n%s", res, out.String())
	}
	for _, line := range []string{"\"held\"\t100\t101\tok\n", "\"behind\"\t60\t51\tBELOW\n", "\"absent\"\t1\t1\tBELOW\n", "\"zero\"\t0\t1\tok\n", "\"top\"\t9223372036854775807\tnone (at 2^63-1)\tok\n", "\"bad\"\t-\t-\tREFUSED not an integer\n"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("no line %q:\n%s", line, out.String())
		}
	}
}
