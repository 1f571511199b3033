package chaos

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scriptedServer answers RESP commands on loopback as exec says: MULTI is
// +OK, queued commands +QUEUED, and exec gets the queued commands and
// writes EXEC's answer ("" closes the connection instead). DISCARD is +OK.
func scriptedServer(t *testing.T, exec func(queued [][]string) string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				var queued [][]string
				inTx := false
				for {
					cmd, err := readCommand(r)
					if err != nil {
						return
					}
					var out string
					switch name := strings.ToUpper(cmd[0]); {
					case name == "MULTI":
						inTx, out = true, "+OK\r\n"
					case name == "DISCARD":
						inTx, queued, out = false, nil, "+OK\r\n"
					case name == "EXEC":
						if out = exec(queued); out == "" {
							return
						}
						inTx, queued = false, nil
					case inTx:
						queued, out = append(queued, cmd), "+QUEUED\r\n"
					default:
						out = "-ERR not scripted\r\n"
					}
					c.Write([]byte(out))
				}
			}()
		}
	}()
	return l.Addr().String()
}

func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	cmd := make([]string, n)
	for i := range cmd {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		arg, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		cmd[i] = strings.TrimSuffix(arg, "\r\n")
	}
	return cmd, nil
}

// TestTransactionsAreRecordedPerCommand: EXEC's array gives each queued
// command its own outcome, EXECABORT refuses them all, a lost answer leaves
// them all unknown, and a DISCARD records nothing it queued.
func TestTransactionsAreRecordedPerCommand(t *testing.T) {
	queued := []opSpec{{kind: KIncr, key: "t"}, {kind: KNextID, n: 2}, {kind: KSet, key: "t", n: 5}, {kind: KIncrBy, key: "t", n: 10}}
	cases := []struct {
		name     string
		kind     Kind
		exec     string
		head     Outcome
		outcomes []Outcome // of the queued commands, in order
	}{
		{"exec", KExec, "*4\r\n:7\r\n*2\r\n:100\r\n:101\r\n-TRYAGAIN no leader\r\n:30\r\n", OK, []Outcome{OK, OK, Unknown, OK}},
		{"execabort", KExec, "-EXECABORT Transaction discarded because of previous errors.\r\n", Refused, []Outcome{Refused, Refused, Refused, Refused}},
		{"lost", KExec, "", Unknown, []Outcome{Unknown, Unknown, Unknown, Unknown}},
		{"wrong shape", KExec, "*1\r\n:7\r\n", Unknown, []Outcome{Unknown, Unknown, Unknown, Unknown}},
		{"discard", KDiscard, "", OK, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := scriptedServer(t, func([][]string) string { return tc.exec })
			rc, err := dialRESP(addr, 1, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.close()
			w := &workload{hist: &History{}, t0: time.Now(), step: 1000}
			head := w.doTx(rc, &proc{nodeID: "n0"}, 0, 0, tc.kind, queued)
			if head.Outcome != tc.head {
				t.Fatalf("transaction %s (%s), want %s", head.Outcome, head.Err, tc.head)
			}
			ops := w.hist.Ops[1:]
			if len(ops) != len(tc.outcomes) {
				t.Fatalf("%d queued commands recorded, want %d: %v", len(ops), len(tc.outcomes), ops)
			}
			for i, op := range ops {
				if op.Outcome != tc.outcomes[i] || op.Tx != head.Tx || op.Start != head.Start || op.End != head.End {
					t.Errorf("queued %d: %s", i, op)
				}
			}
			if tc.name == "exec" {
				if got := fmt.Sprint(ops[0].First, ops[0].Last, ops[1].IDs, ops[3].First, ops[3].Last); got != "7 7 [100 101] 21 30" {
					t.Errorf("values recorded: %s", got)
				}
			}
			if v := Check(w.hist, 8, time.Second); tc.name == "wrong shape" && v.Counts["bad-reply"] != 1 {
				t.Errorf("a reply of the wrong shape is no bad-reply: %v", v.Counts)
			}
		})
	}
}
