package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// VerifyResult is what a verify pass found.
type VerifyResult struct {
	Checked int64 // keys compared
	// Below is how many keys idserver would hand out a value at or below
	// the source's: a cut-over now would repeat values of those.
	Below   int64
	Refused int64 // keys the source holds that an import refuses
}

// Verify reads every counter src selects and, per key, idserver's next
// value (above the tag's high-water, GET), over Options.Conns connections
// spread over Options.To, and writes one line per key to out: key, source
// value, idserver's next, and "ok" or "BELOW" (or "REFUSED" and why). It
// changes nothing.
func Verify(ctx context.Context, src Source, opts Options, out io.Writer) (VerifyResult, error) {
	opts.defaults()
	var res VerifyResult
	if err := checkTargets(ctx, opts); err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // res and out
	fmt.Fprintln(out, "key\tsource\tidserver_next\tstate")
	batches := make(chan []Counter, opts.Conns)
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for i := range opts.Conns {
		addr := opts.To[i%len(opts.To)]
		c := redis.NewClient(&redis.Options{Addr: addr, Password: opts.Password, Protocol: 2,
			DisableIdentity: true, MaxRetries: -1, PoolSize: 1, ReadTimeout: opts.Timeout})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for batch := range batches {
				lines, below, refused, err := verifyBatch(ctx, c, addr, batch, opts.Timeout)
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					continue
				}
				mu.Lock()
				io.WriteString(out, lines)
				res.Checked += int64(len(batch)) - refused
				res.Below += below
				res.Refused += refused
				mu.Unlock()
			}
		}()
	}
	err := src.Read(ctx, opts.Batch, func(batch []Counter) error {
		select {
		case batches <- batch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(batches)
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	if err != nil {
		return res, fmt.Errorf("reading %s: %w", src.Name(), err)
	}
	return res, nil
}

// verifyBatch GETs a batch's tags from idserver, tried again until
// timeout, and returns its lines and how many keys were below or refused.
func verifyBatch(ctx context.Context, c *redis.Client, addr string, batch []Counter, timeout time.Duration) (lines string, below, refused int64, err error) {
	for i, k := range batch {
		if k.Refused == "" {
			batch[i].Refused = checkKey(k.Key)
		}
	}
	var gets []*redis.StringCmd
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		pipe := c.Pipeline()
		gets = make([]*redis.StringCmd, len(batch))
		for i, k := range batch {
			if k.Refused == "" {
				gets[i] = pipe.Get(ctx, k.Key)
			}
		}
		_, err := pipe.Exec(ctx)
		if err == nil || errors.Is(err, redis.Nil) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", 0, 0, fmt.Errorf("GET from %s: %w", addr, err)
		}
	}
	var b []byte
	for i, k := range batch {
		if k.Refused != "" {
			refused++
			b = fmt.Appendf(b, "%q\t-\t-\tREFUSED %s\n", k.Key, k.Refused)
			continue
		}
		high, err := gets[i].Int64() // the next value is high+1; a tag idserver does not hold starts at 1
		switch {
		case errors.Is(err, redis.Nil):
			high = 0
		case err != nil:
			return "", 0, 0, fmt.Errorf("GET %q from %s: %w", k.Key, addr, err)
		}
		next := "none (at 2^63-1)"
		if high < math.MaxInt64 {
			next = strconv.FormatInt(high+1, 10)
		}
		state := "ok"
		if high < k.Value {
			state = "BELOW"
			below++
		}
		b = fmt.Appendf(b, "%q\t%d\t%s\t%s\n", k.Key, k.Value, next, state)
	}
	return string(b), below, refused, nil
}
