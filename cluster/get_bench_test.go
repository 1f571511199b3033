package cluster_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"idserver/internal/testcluster"
	idnode "idserver/node"
)

// BenchmarkGET is the cost of one GET (the cluster-wide high-water of a
// tag) on a one-node cluster and on the leader and a follower of a
// three-node one: one client at a time (latency), and 50 at once.
func BenchmarkGET(b *testing.B) {
	for _, size := range []int{1, 3} {
		nodes := testcluster.New(b, size, func(c *idnode.Config) { c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) })
		ctx := context.Background()
		l := nodes.WaitLeader(b)
		if err := l.Client.Incr(ctx, "bench").Err(); err != nil {
			b.Fatal(err)
		}
		targets := map[string]*testcluster.Node{"leader": l}
		if size > 1 {
			for _, n := range nodes {
				if n != l {
					targets["follower"] = n
					break
				}
			}
		}
		for role, n := range targets {
			b.Run(sizeName(size)+"/"+role+"/serial", func(b *testing.B) {
				for range b.N {
					if err := n.Client.Get(ctx, "bench").Err(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(sizeName(size)+"/"+role+"/50clients", func(b *testing.B) {
				b.SetParallelism(25) // 2 cores: 50 goroutines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := n.Client.Get(ctx, "bench").Err(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
		for _, n := range nodes {
			n.Stop()
		}
	}
}

func sizeName(size int) string {
	if size == 1 {
		return "1node"
	}
	return "3nodes"
}
