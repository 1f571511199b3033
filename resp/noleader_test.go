package resp

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"idserver/engine"
)

// forgetFails is a cluster whose FORGET fails with err.
type forgetFails struct {
	*fakeCluster
	err error
}

func (f forgetFails) Forget(context.Context, string) error { return f.err }

// TestNoLeaderReplyShowsTheDetail: an ErrNoLeader is TRYAGAIN, with its
// detail in parentheses when it has one, whatever its cause.
func TestNoLeaderReplyShowsTheDetail(t *testing.T) {
	const try = "TRYAGAIN no leader reachable for this request; try again"
	for _, c := range []struct {
		err  error
		want string
	}{
		{&engine.NoLeaderError{Cause: errors.New("a cause"), Detail: "node n1 led; leadership moved to another member: retry the FORGET"},
			try + " (node n1 led; leadership moved to another member: retry the FORGET)"},
		{&engine.NoLeaderError{Cause: engine.ErrRefillLate}, try},
		{engine.ErrNoLeader, try},
	} {
		addr := startServer(t, Config{Cluster: forgetFails{newFakeCluster(), c.err}})
		rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1})
		err := rdb.Do(context.Background(), "CLUSTER", "FORGET", "n1").Err()
		rdb.Close()
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: replied %v, want %q", c.err, err, c.want)
		}
	}
}
