package resp

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// TestFrameParser: the guard's cases, fed the way a connection reads
// them: byte by byte, three at a time, and whole.
func TestFrameParser(t *testing.T) {
	long := strings.Repeat("a", 64<<10+1)
	cases := []struct {
		name    string
		in      string
		preAuth bool
		out     string // the commands handed on, as multibulk; "=" for the input unchanged
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
		{name: "count at limit", in: "*1024\r\n", out: ""},
		{name: "empty count", in: "*\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "leading zero", in: "*01\r\n", out: "", refuse: "invalid multibulk length"},
		{name: "count without LF", in: "*1\rX", out: "", refuse: "invalid multibulk length"},
		{name: "overflowing bulk", in: "*1\r\n$9223372036854775807\r\n", out: "", refuse: "invalid bulk length"},
		{name: "bulk over limit", in: "*1\r\n$65537\r\n", out: "", refuse: "invalid bulk length"},
		{name: "negative bulk", in: "*1\r\n$-1\r\n", out: "", refuse: "invalid bulk length"},
		{name: "not a dollar", in: "*1\r\n:5\r\n", out: "", refuse: "expected '$', got ':'"},
		{name: "bad payload end", in: "*1\r\n$1\r\naXY", out: "", refuse: "invalid bulk format"},
		{name: "inline too long", in: long, out: "", refuse: "too big inline request"},
		{name: "pre-auth count", in: "*11\r\n", preAuth: true, out: "", refuse: "unauthenticated multibulk length"},
		{name: "pre-auth bulk", in: "*1\r\n$16385\r\n", preAuth: true, out: "", refuse: "unauthenticated bulk length"},
		{name: "pre-auth ok", in: "*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$1\r\nx\r\n", preAuth: true, out: "="},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.out
			if want == "=" {
				want = tc.in
			}
			for _, chunk := range []int{1, 3, len(tc.in)} {
				cmds, refusal := parseInChunks(DefaultLimits(), []byte(tc.in), chunk, tc.preAuth)
				var out []byte
				for _, cmd := range cmds {
					out = referenceMultiBulk(out, cmd)
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

// parseInChunks feeds in to a frameParser as serveConn does, chunk bytes
// per read, and returns the commands (copied) and the refusal, if any.
func parseInChunks(lim Limits, in []byte, chunk int, preAuth bool) (cmds [][][]byte, refusal *errProtocol) {
	p := frameParser{lim: lim}
	var buf []byte
	for off := 0; off < len(in); off += chunk {
		buf = append(buf, in[off:min(off+chunk, len(in))]...)
		for len(buf) > 0 {
			args, used, err := p.parse(buf, preAuth)
			if err != nil {
				return cmds, err
			}
			if used == 0 {
				break
			}
			if args != nil {
				cmds = append(cmds, cloneArgs(args, len(buf)))
			}
			buf = buf[used:]
		}
	}
	return cmds, nil
}

// FuzzFrameGuard: whatever the bytes and however reads split them, the
// parser does not panic or spin, hands on nothing beyond the limits, and
// hands on exactly the commands, and refuses with exactly the words, that
// the guard in front of redcon's reader did before it
// (guard_reference_test.go). The corpus is the old guard's.
func FuzzFrameGuard(f *testing.F) {
	for _, seed := range []string{
		"*2\r\n$6\r\nNEXTID\r\n$2\r\n10\r\n",
		"NEXTID 5\r\n",
		"*1\r\n$9223372036854775807\r\n",
		"*99999999999999\r\n",
		"*3\r\n$1\r\na\r\n$-5\r\n",
		"*1\r\n$4\r\nPING\r\n*1",
		"\"unbalanced\r\n",
		"*2\r\n$4\r\nAUTH\r\n$17\r\n",
	} {
		f.Add([]byte(seed), uint8(7))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		lim := Limits{MaxArgs: 16, MaxBulk: 64, MaxInline: 128, PreAuthArgs: 4, PreAuthBulk: 16}
		chunk, preAuth := int(split)%16+1, split >= 128
		var cmds [][][]byte
		var refusal *errProtocol
		done := make(chan struct{})
		go func() {
			defer close(done)
			cmds, refusal = parseInChunks(lim, in, chunk, preAuth)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("the parser spun on %q", in)
		}
		for _, cmd := range cmds {
			if len(cmd) > lim.MaxArgs {
				t.Errorf("a command with %d args got through", len(cmd))
			}
			for _, a := range cmd {
				if len(a) > max(lim.MaxBulk, lim.MaxInline) {
					t.Errorf("an argument of %d bytes got through", len(a))
				}
			}
		}

		old := referenceScanner{lim: lim, authed: func() bool { return !preAuth }}
		var passed []byte
		var oldRefusal *errProtocol
		for off := 0; off < len(in) && oldRefusal == nil; off += chunk {
			passed, oldRefusal = old.scan(passed, in[off:min(off+chunk, len(in))])
		}
		var oldCmds [][][]byte
		rd := redcon.NewReader(bytes.NewReader(passed))
		for {
			got, err := rd.ReadCommands()
			if err != nil {
				break
			}
			for _, cmd := range got {
				oldCmds = append(oldCmds, cmd.Args)
			}
		}
		switch {
		case (refusal == nil) != (oldRefusal == nil) || refusal != nil && refusal.msg != oldRefusal.msg:
			t.Fatalf("%q: refused %v, the old guard %v", in, refusal, oldRefusal)
		case len(cmds) != len(oldCmds):
			t.Fatalf("%q: %d commands, the old guard %d: %q, %q", in, len(cmds), len(oldCmds), cmds, oldCmds)
		}
		for i := range cmds {
			if len(cmds[i]) != len(oldCmds[i]) {
				t.Fatalf("%q: command %d is %q, the old guard's %q", in, i, cmds[i], oldCmds[i])
			}
			for j := range cmds[i] {
				if !bytes.Equal(cmds[i][j], oldCmds[i][j]) {
					t.Fatalf("%q: command %d is %q, the old guard's %q", in, i, cmds[i], oldCmds[i])
				}
			}
		}
	})
}

// FuzzSplitArgs: splitting an inline line never panics, and whatever it
// splits into, written back as double-quoted \xHH escapes, splits the same.
//
// It also holds the new splitter to the old one (the oracle in
// guard_reference_test.go), byte for byte.
func FuzzSplitArgs(f *testing.F) {
	for _, seed := range []string{`SET a "b c"`, `ECHO 'it\'s'`, "\tPING\t", `"\x41\n"`, `a"b"`, `"unbalanced`, "x\x00y"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		args, ok := splitArgs(line)
		oldArgs, oldOK := referenceSplitArgs(line)
		if ok != oldOK || len(args) != len(oldArgs) {
			t.Fatalf("%q: split into %q, %v; the old splitter %q, %v", line, args, ok, oldArgs, oldOK)
		}
		for i := range args {
			if !bytes.Equal(args[i], oldArgs[i]) {
				t.Fatalf("%q: split into %q; the old splitter %q", line, args, oldArgs)
			}
		}
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
