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
		out     string // what is handed on; "=" for the input unchanged
		refuse  string // "" when no byte is refused
	}{
		{name: "command", in: "*2\r\n$6\r\nNEXTID\r\n$2\r\n10\r\n", out: "="},
		{name: "pipeline", in: "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\nPING\r\n", out: "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n"},
		{name: "inline", in: "NEXTID 10\r\nPING\n", out: "*2\r\n$6\r\nNEXTID\r\n$2\r\n10\r\n*1\r\n$4\r\nPING\r\n"},
		{name: "inline tabs and quotes", in: "SET\t\"a b\"  'c\\'d'\r\n", out: "*3\r\n$3\r\nSET\r\n$3\r\na b\r\n$3\r\nc'd\r\n"},
		{name: "inline hex escape", in: "ECHO \"\\x41\\x7a\\n\"\n", out: "*2\r\n$4\r\nECHO\r\n$3\r\nAz\n\r\n"},
		{name: "inline blank", in: "  \t \r\n\n", out: ""},
		{name: "inline NUL ends the line", in: "ECHO a\x00b\n", out: "*2\r\n$4\r\nECHO\r\n$1\r\na\r\n"},
		{name: "unbalanced quotes", in: "PING\nECHO \"a\n", out: "*1\r\n$4\r\nPING\r\n", refuse: "unbalanced quotes in request"},
		{name: "text after closing quote", in: "ECHO \"a\"b\n", out: "", refuse: "unbalanced quotes in request"},
		{name: "empty bulk", in: "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", out: "="},
		{name: "zero count ignored", in: "*0\r\n*1\r\n$4\r\nPING\r\n", out: "*1\r\n$4\r\nPING\r\n"},
		{name: "negative count ignored", in: "*-1\r\n*-25\r\nPING\r\n", out: "*1\r\n$4\r\nPING\r\n"},
		{name: "minus zero", in: "*-0\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "minus alone", in: "*-\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "huge negative", in: "*-9999999999999999999\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "huge count", in: "*99999999999999999999999\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "count over limit", in: "*1025\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "count at limit", in: "*1024\r\n", out: "*1024\r\n"},
		{name: "empty count", in: "*\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "leading zero", in: "*01\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "count without LF", in: "*1\rX", out: "", refuse: "invalid multibulk length"},
		{name: "overflowing bulk", in: "*1\r\n$9223372036854775807\r\n", out: "*1\r\n$9223", refuse: "invalid bulk length"},
		{name: "bulk over limit", in: "*1\r\n$65537\r\n", out: "*1\r\n$65536"[:9], refuse: "invalid bulk length"},
		{name: "negative bulk", in: "*1\r\n$-1\r\n", out: "*1\r\n$", refuse: "invalid bulk length"},
		{name: "not a dollar", in: "*1\r\n:5\r\n", out: "*1\r\n", refuse: "expected '$', got ':'"},
		{name: "bad payload end", in: "*1\r\n$1\r\naXY", out: "*1\r\n$1\r\na", refuse: "invalid bulk format"},
		{name: "inline too long", in: long, out: "", refuse: "too big inline request"},
		{name: "pre-auth count", in: "*11\r\n", preAuth: true, out: "", refuse: "unauthenticated multibulk length"},
		{name: "pre-auth bulk", in: "*1\r\n$16385\r\n", preAuth: true, out: "*1\r\n$1638", refuse: "unauthenticated bulk length"},
		{name: "pre-auth ok", in: "*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$1\r\nx\r\n", preAuth: true, out: "="},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.out
			if want == "=" {
				want = tc.in
			}
			// Byte by byte and whole: the scanner must not depend on how reads split.
			for _, chunk := range []int{1, 3, len(tc.in)} {
				s := frameScanner{lim: DefaultLimits(), authed: func() bool { return !tc.preAuth }}
				var out []byte
				var refusal *errProtocol
				for off := 0; off < len(tc.in) && refusal == nil; off += chunk {
					out, refusal = s.scan(out, []byte(tc.in[off:min(off+chunk, len(tc.in))]))
				}
				switch {
				case tc.refuse == "" && refusal != nil:
					t.Fatalf("chunk %d: refused %q after %q", chunk, refusal.msg, out)
				case tc.refuse != "" && refusal == nil:
					t.Fatalf("chunk %d: accepted, want %q", chunk, tc.refuse)
				case tc.refuse != "" && refusal.msg != tc.refuse:
					t.Fatalf("chunk %d: refused %q, want %q", chunk, refusal.msg, tc.refuse)
				case string(out) != want:
					t.Fatalf("chunk %d: handed on %q, want %q", chunk, out, want)
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
	if _, err := s.scan(nil, []byte("*1\r\n$9223372036854775807\r\n")); err == nil {
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
			var err *errProtocol
			if passed, err = s.scan(passed, in[off:min(off+chunk, len(in))]); err != nil {
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

// FuzzSplitArgs: splitting an inline line never panics, and whatever it
// splits into, written back as double-quoted \xHH escapes, splits the same.
func FuzzSplitArgs(f *testing.F) {
	for _, seed := range []string{`SET a "b c"`, `ECHO 'it\'s'`, "\tPING\t", `"\x41\n"`, `a"b"`, `"unbalanced`, "x\x00y"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		args, ok := splitArgs(line)
		if !ok {
			return
		}
		var again []byte
		for _, a := range args {
			again = append(again, " \""...)
			for _, b := range a {
				again = append(again, '\\', 'x', "0123456789abcdef"[b>>4], "0123456789abcdef"[b&15])
			}
			again = append(again, '"')
		}
		back, ok := splitArgs(again)
		if !ok || len(back) != len(args) {
			t.Fatalf("%q split into %q; written back as %q it splits into %q, %v", line, args, again, back, ok)
		}
		for i := range args {
			if !bytes.Equal(back[i], args[i]) {
				t.Fatalf("%q: argument %d %q came back as %q", line, i, args[i], back[i])
			}
		}
	})
}
