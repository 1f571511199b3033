package resp

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

func TestFrameScanner(t *testing.T) {
	long := strings.Repeat("a", 64<<10+1)
	cases := []struct {
		name    string
		in      string
		preAuth bool
		refuse  string // "" when every byte is accepted
		at      int    // bytes accepted before the refusal
	}{
		{name: "command", in: "*2\r\n$6\r\nNEXTID\r\n$2\r\n10\r\n"},
		{name: "pipeline", in: "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\nPING\r\n"},
		{name: "inline", in: "NEXTID 10\r\nPING\n"},
		{name: "empty bulk", in: "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"},
		{name: "huge count", in: "*99999999999999999999999\r\n", refuse: "invalid multibulk length", at: 4},
		{name: "count over limit", in: "*1025\r\n", refuse: "invalid multibulk length", at: 4},
		{name: "count at limit", in: "*1024\r\n"},
		{name: "negative count", in: "*-1\r\n", refuse: "invalid multibulk length", at: 1},
		{name: "zero count", in: "*0\r\n", refuse: "invalid multibulk length", at: 3},
		{name: "empty count", in: "*\r\n", refuse: "invalid multibulk length", at: 1},
		{name: "leading zero", in: "*01\r\n", refuse: "invalid multibulk length", at: 2},
		{name: "count without LF", in: "*1\rX", refuse: "invalid multibulk length", at: 3},
		{name: "overflowing bulk", in: "*1\r\n$9223372036854775807\r\n", refuse: "invalid bulk length", at: 9},
		{name: "bulk over limit", in: "*1\r\n$65537\r\n", refuse: "invalid bulk length", at: 9},
		{name: "negative bulk", in: "*1\r\n$-1\r\n", refuse: "invalid bulk length", at: 5},
		{name: "not a dollar", in: "*1\r\n:5\r\n", refuse: "expected '$', got ':'", at: 4},
		{name: "bad payload end", in: "*1\r\n$1\r\naXY", refuse: "invalid bulk format", at: 9},
		{name: "inline too long", in: long, refuse: "too big inline request", at: 64 << 10},
		{name: "pre-auth count", in: "*11\r\n", preAuth: true, refuse: "unauthenticated multibulk length", at: 2},
		{name: "pre-auth bulk", in: "*1\r\n$16385\r\n", preAuth: true, refuse: "unauthenticated bulk length", at: 9},
		{name: "pre-auth ok", in: "*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$1\r\nx\r\n", preAuth: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Byte by byte and whole: the scanner must not depend on how reads split.
			for _, chunk := range []int{1, 3, len(tc.in)} {
				s := frameScanner{lim: DefaultLimits(), authed: func() bool { return !tc.preAuth }}
				accepted := 0
				var refusal *errProtocol
				for off := 0; off < len(tc.in) && refusal == nil; off += chunk {
					p := []byte(tc.in[off:min(off+chunk, len(tc.in))])
					n, err := s.scan(p)
					accepted += n
					refusal = err
				}
				switch {
				case tc.refuse == "" && refusal != nil:
					t.Fatalf("chunk %d: refused %q at %d", chunk, refusal.msg, accepted)
				case tc.refuse != "" && refusal == nil:
					t.Fatalf("chunk %d: accepted, want %q", chunk, tc.refuse)
				case tc.refuse != "" && (refusal.msg != tc.refuse || accepted != tc.at):
					t.Fatalf("chunk %d: refused %q at %d, want %q at %d", chunk, refusal.msg, accepted, tc.refuse, tc.at)
				}
			}
		})
	}
}

// TestRedconAloneFallsToAFrame documents why the guard exists: without it,
// one small packet crashes redcon's reader. If this ever stops failing,
// redcon has been fixed and the guard is a second line rather than the only one.
func TestRedconAloneFallsToAFrame(t *testing.T) {
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		rd := redcon.NewReader(bytes.NewReader([]byte("*1\r\n$9223372036854775807\r\n")))
		rd.ReadCommands()
		return false
	}()
	if !panicked {
		t.Skip("redcon no longer panics on an overflowing bulk length; the guard still refuses it")
	}
	s := frameScanner{lim: DefaultLimits()}
	if _, err := s.scan([]byte("*1\r\n$9223372036854775807\r\n")); err == nil {
		t.Fatal("the guard let the crashing frame through")
	}
}

// FuzzFrameGuard: whatever the bytes and however they are split, the guard
// does not panic, and what it lets through never makes redcon's reader
// panic, spin, or hand on a command beyond the limits.
func FuzzFrameGuard(f *testing.F) {
	for _, seed := range []string{
		"*2\r\n$6\r\nNEXTID\r\n$2\r\n10\r\n",
		"NEXTID 5\r\n",
		"*1\r\n$9223372036854775807\r\n",
		"*99999999999999\r\n",
		"*3\r\n$1\r\na\r\n$-5\r\n",
		"*1\r\n$4\r\nPING\r\n*1",
		"\"unbalanced\r\n",
	} {
		f.Add([]byte(seed), uint8(7))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		lim := Limits{MaxArgs: 16, MaxBulk: 64, MaxInline: 128, PreAuthArgs: 4, PreAuthBulk: 16}
		s := frameScanner{lim: lim}
		chunk := int(split)%16 + 1
		var passed []byte
		for off := 0; off < len(in); off += chunk {
			p := in[off:min(off+chunk, len(in))]
			n, err := s.scan(p)
			if n < 0 || n > len(p) {
				t.Fatalf("scan accepted %d of %d bytes", n, len(p))
			}
			passed = append(passed, p[:n]...)
			if err != nil {
				break
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			rd := redcon.NewReader(bytes.NewReader(passed))
			for {
				cmds, err := rd.ReadCommands()
				if err != nil {
					return
				}
				for _, cmd := range cmds {
					if len(cmd.Args) > lim.MaxArgs {
						t.Errorf("a command with %d args got through", len(cmd.Args))
					}
					for _, a := range cmd.Args {
						if len(a) > max(lim.MaxBulk, lim.MaxInline) {
							t.Errorf("an argument of %d bytes got through", len(a))
						}
					}
				}
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("redcon's reader spun on %q", passed)
		}
	})
}
