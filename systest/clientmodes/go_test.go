package clientmodes

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// goClient is one Go client under test: what it does against a cluster's
// addresses.
type goClient struct {
	name  string
	sizes []int
	flags []string // the servers'
	open  func(addrs []string) (session, func())
}

// session is the commands the test sends through a client.
type session interface {
	incr(ctx context.Context, tag string) (int64, error)
	nextID(ctx context.Context) (int64, error)
	pipeline(ctx context.Context, tag string) ([]int64, error) // INCR tag twice
	tx(ctx context.Context, tag string) ([]int64, error)       // MULTI, INCR tag twice, EXEC
}

// goRedis drives any go-redis client.
type goRedis struct{ c redis.UniversalClient }

func (g goRedis) incr(ctx context.Context, tag string) (int64, error) {
	return g.c.Incr(ctx, tag).Result()
}
func (g goRedis) nextID(ctx context.Context) (int64, error) { return g.c.Do(ctx, "NEXTID").Int64() }

func (g goRedis) pipeline(ctx context.Context, tag string) ([]int64, error) {
	return incrsOf(g.c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Incr(ctx, tag); p.Incr(ctx, tag); return nil }))
}

func (g goRedis) tx(ctx context.Context, tag string) ([]int64, error) {
	return incrsOf(g.c.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Incr(ctx, tag); p.Incr(ctx, tag); return nil }))
}

func incrsOf(cmds []redis.Cmder, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, c := range cmds {
		v, err := c.(*redis.IntCmd).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// rueidisClient drives rueidis.
type rueidisClient struct{ c rueidis.Client }

func (r rueidisClient) incr(ctx context.Context, tag string) (int64, error) {
	return r.c.Do(ctx, r.c.B().Incr().Key(tag).Build()).AsInt64()
}

func (r rueidisClient) nextID(ctx context.Context) (int64, error) {
	return r.c.Do(ctx, r.c.B().Arbitrary("NEXTID").Build()).AsInt64()
}

func (r rueidisClient) pipeline(ctx context.Context, tag string) ([]int64, error) {
	return rueidisInts(r.c.DoMulti(ctx, r.c.B().Incr().Key(tag).Build(), r.c.B().Incr().Key(tag).Build()))
}

func (r rueidisClient) tx(ctx context.Context, tag string) ([]int64, error) {
	res := r.c.DoMulti(ctx, r.c.B().Multi().Build(), r.c.B().Incr().Key(tag).Build(), r.c.B().Incr().Key(tag).Build(), r.c.B().Exec().Build())
	for _, x := range res[:3] {
		if err := x.Error(); err != nil {
			return nil, err
		}
	}
	arr, err := res[3].ToArray()
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, m := range arr {
		v, err := m.AsInt64()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func rueidisInts(res []rueidis.RedisResult) ([]int64, error) {
	var out []int64
	for _, x := range res {
		v, err := x.AsInt64()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// emulated are the flags cluster clients need; Sentinel clients need none.
var emulated = []string{"--cluster-mode", "emulated"}

var goClients = []goClient{
	{name: "go-redis NewClusterClient", sizes: []int{1, 3}, flags: emulated, open: func(addrs []string) (session, func()) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		return goRedis{c}, func() { c.Close() }
	}},
	{name: "go-redis NewUniversalClient", sizes: []int{3}, flags: emulated, open: func(addrs []string) (session, func()) {
		c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
		if _, ok := c.(*redis.ClusterClient); !ok {
			panic(fmt.Sprintf("NewUniversalClient of %d addresses is a %T", len(addrs), c))
		}
		return goRedis{c}, func() { c.Close() }
	}},
	{name: "go-redis NewFailoverClient", sizes: []int{1, 3}, open: func(addrs []string) (session, func()) {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: addrs})
		return goRedis{c}, func() { c.Close() }
	}},
	{name: "rueidis", sizes: []int{1, 3}, flags: emulated, open: func(addrs []string) (session, func()) {
		// DisableCache: idserver refuses client-side caching (CLIENT
		// TRACKING), which rueidis turns on by default.
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			panic(err)
		}
		return rueidisClient{c}, c.Close
	}},
}

// TestGoClientsInClusterAndSentinelMode: each Go client, with its default
// options, on one node and on three: INCR, NEXTID, a pipeline and a
// transaction; then the node it uses is killed (on one node, restarted)
// and it carries on by itself, with no value repeated or going back.
func TestGoClientsInClusterAndSentinelMode(t *testing.T) {
	for _, gc := range goClients {
		for _, size := range gc.sizes {
			t.Run(fmt.Sprintf("%s/%d", gc.name, size), func(t *testing.T) {
				nodes := startCluster(t, size, gc.flags...)
				s, closeClient := gc.open(addrs(nodes))
				defer closeClient()
				var incrs, ids []int64
				ctx := context.Background()
				exercise := func() error {
					for range 3 {
						v, err := s.incr(ctx, "orders")
						if err != nil {
							return fmt.Errorf("INCR: %w", err)
						}
						incrs = append(incrs, v)
					}
					for range 3 {
						v, err := s.nextID(ctx)
						if err != nil {
							return fmt.Errorf("NEXTID: %w", err)
						}
						ids = append(ids, v)
					}
					v, err := s.pipeline(ctx, "orders")
					if err != nil {
						return fmt.Errorf("pipeline: %w", err)
					}
					incrs = append(incrs, v...)
					if v, err = s.tx(ctx, "orders"); err != nil {
						return fmt.Errorf("transaction: %w", err)
					}
					incrs = append(incrs, v...)
					return nil
				}
				if err := exercise(); err != nil {
					t.Fatal(err)
				}
				before := ids
				ids = nil
				used := inUse(t, nodes)
				used.p.Kill()
				killed := time.Now()
				first := make(chan error, 1)
				var outage time.Duration
				go func() {
					var last error
					for time.Since(killed) < 60*time.Second {
						v, err := s.incr(ctx, "orders")
						if err == nil {
							outage = time.Since(killed)
							incrs = append(incrs, v)
							first <- nil
							return
						}
						last = err
						time.Sleep(5 * time.Millisecond)
					}
					first <- errors.Join(errors.New("no INCR within 60s of the kill"), last)
				}()
				restartAlone(t, nodes)
				if err := <-first; err != nil {
					t.Fatal(err)
				}
				// A client may fail a command or two more while it settles
				// on its new map (rueidis sent a NEXTID, which it does not
				// retry, to the dead node's connection once): the round is
				// sent again until it passes whole.
				for errs, settling := 0, time.Now(); ; errs++ {
					err := exercise()
					if err == nil {
						if errs > 0 {
							t.Logf("%s: %d rounds after the first INCR failed while the client settled", gc.name, errs)
						}
						break
					}
					if time.Since(settling) > 30*time.Second {
						t.Fatalf("after the kill: %v", err)
					}
					time.Sleep(20 * time.Millisecond)
				}
				checkValues(t, gc.name, incrs, before, ids)
				t.Logf("OUTAGE %s on %d node(s): %d ms from the kill of %s to the first INCR answered", gc.name, size, outage.Milliseconds(), used.addr())
			})
		}
	}
}
