package importer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisSource reads INCR counters from a running Redis: the keys SCAN
// finds for a pattern, their values by pipelined GET.
type RedisSource struct {
	c     *redis.Client
	addr  string
	match string
}

// NewRedisSource connects to the Redis that url names
// (redis://[user:password@]host:port[/db], or rediss:// for TLS) and
// selects the keys that match pattern (SCAN's MATCH; "*" for all).
func NewRedisSource(url, pattern string) (*RedisSource, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.Protocol = 2
	opt.DisableIdentity = true
	if pattern == "" {
		pattern = "*"
	}
	return &RedisSource{c: redis.NewClient(opt), addr: opt.Addr, match: pattern}, nil
}

// Name is the source's address and pattern.
func (s *RedisSource) Name() string { return fmt.Sprintf("redis %s (keys %q)", s.addr, s.match) }

// Total is DBSIZE: every key, so at most the number selected.
func (s *RedisSource) Total(ctx context.Context) int64 {
	n, err := s.c.DBSize(ctx).Result()
	if err != nil {
		return -1
	}
	return n
}

// Read scans the keys and GETs them, n at a time. A key whose value is not
// a counter is passed refused; a key gone between SCAN and GET is left
// out.
func (s *RedisSource) Read(ctx context.Context, n int, emit func([]Counter) error) error {
	var cursor uint64
	var pending []string
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		pipe := s.c.Pipeline()
		gets := make([]*redis.StringCmd, len(pending))
		for i, k := range pending {
			gets[i] = pipe.Get(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
			return err
		}
		batch := make([]Counter, 0, len(pending))
		for i, k := range pending {
			raw, err := gets[i].Result()
			switch {
			case errors.Is(err, redis.Nil):
				continue
			case isWrongType(err):
				batch = append(batch, Counter{Key: k, Refused: "holds a value that is not a string (" + err.Error() + ")"})
			case err != nil:
				return err
			default:
				v, why := ParseValue(raw)
				batch = append(batch, Counter{Key: k, Value: v, Refused: why})
			}
		}
		pending = pending[:0]
		return emit(batch)
	}
	for {
		keys, next, err := s.c.Scan(ctx, cursor, s.match, int64(n)).Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			pending = append(pending, k)
			if len(pending) == n {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if cursor = next; cursor == 0 {
			return flush()
		}
	}
}

func isWrongType(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

// Close ends the connection.
func (s *RedisSource) Close() error { return s.c.Close() }
