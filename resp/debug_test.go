package resp

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestDebugRefusedWithoutTheFlag: without a DebugClock, DEBUG answers
// Redis 7's words for enable-debug-command "no", whatever the subcommand.
func TestDebugRefusedWithoutTheFlag(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: startServer(t, Config{}), Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	for _, args := range [][]any{{"DEBUG", "CLOCK"}, {"DEBUG", "CLOCK", "-1000"}, {"debug", "sleep", "0"}} {
		err := rdb.Do(ctx, args...).Err()
		if err == nil || err.Error() != errDebugDisabled {
			t.Errorf("%v: %v, want %q", args, err, errDebugDisabled)
		}
	}
	if err := rdb.Do(ctx, "DEBUG").Err(); err == nil || err.Error() != wrongArity("debug") {
		t.Errorf("DEBUG alone: %v", err)
	}
}

// TestDebugClockStepsTheClock: DEBUG CLOCK sets and reads the offset the
// node's clock carries; the clock a generator would read moves with it.
func TestDebugClockStepsTheClock(t *testing.T) {
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	clock := NewOffsetClock(func() time.Time { return base })
	rdb := redis.NewClient(&redis.Options{Addr: startServer(t, Config{Debug: clock}), Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	if ms, err := rdb.Do(ctx, "DEBUG", "CLOCK").Int64(); err != nil || ms != 0 {
		t.Fatalf("DEBUG CLOCK at start: %d %v", ms, err)
	}
	for _, step := range []int64{-3_600_000, -1, 250, 0, 86_400_000, -86_400_000} {
		if err := rdb.Do(ctx, "DEBUG", "CLOCK", step).Err(); err != nil {
			t.Fatalf("DEBUG CLOCK %d: %v", step, err)
		}
		if ms, err := rdb.Do(ctx, "debug", "clock").Int64(); err != nil || ms != step {
			t.Fatalf("after DEBUG CLOCK %d it reads %d %v", step, ms, err)
		}
		if got := clock.Now().Sub(base); got != time.Duration(step)*time.Millisecond {
			t.Fatalf("after DEBUG CLOCK %d the clock is %v off", step, got)
		}
	}
	for _, bad := range []struct {
		args []any
		want string
	}{
		{[]any{"DEBUG", "CLOCK", "x"}, errNotInteger},
		{[]any{"DEBUG", "CLOCK", "86400001"}, "ERR DEBUG CLOCK offset must be within 86400000 ms either way"},
		{[]any{"DEBUG", "CLOCK", "1", "2"}, "ERR unknown subcommand or wrong number of arguments for 'CLOCK'. Try DEBUG HELP."},
		{[]any{"DEBUG", "SEGFAULT"}, "ERR unknown subcommand or wrong number of arguments for 'SEGFAULT'. Try DEBUG HELP."},
	} {
		if err := rdb.Do(ctx, bad.args...).Err(); err == nil || err.Error() != bad.want {
			t.Errorf("%v: %v, want %q", bad.args, err, bad.want)
		}
	}
	if ms, _ := rdb.Do(ctx, "DEBUG", "CLOCK").Int64(); ms != -86_400_000 {
		t.Fatalf("a refused step changed the offset to %d", ms)
	}
	if lines, err := rdb.Do(ctx, "DEBUG", "HELP").StringSlice(); err != nil || len(lines) < 2 {
		t.Fatalf("DEBUG HELP: %v %v", lines, err)
	}
}
