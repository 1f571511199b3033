package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// Verify reads every counter src selects again and, per key, idserver's
// next value (above the tag's high-water, GET), and writes one line per
// key to out: key, source value, idserver's next, and "ok" or "BELOW".
// It changes nothing.
func Verify(ctx context.Context, src Source, opts Options, out io.Writer) (VerifyResult, error) {
	opts.defaults()
	var res VerifyResult
	c := redis.NewClient(&redis.Options{Addr: opts.To[0], Password: opts.Password, Protocol: 2,
		DisableIdentity: true, MaxRetries: 3, PoolSize: 1, ReadTimeout: opts.Timeout})
	defer c.Close()
	fmt.Fprintln(out, "key\tsource\tidserver_next\tstate")
	err := src.Read(ctx, opts.Batch, func(batch []Counter) error {
		for i, k := range batch {
			if k.Refused == "" {
				batch[i].Refused = checkKey(k.Key)
			}
		}
		var gets []*redis.StringCmd
		for deadline := time.Now().Add(opts.Timeout); ; time.Sleep(200 * time.Millisecond) {
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
				return fmt.Errorf("GET from %s: %w", opts.To[0], err)
			}
		}
		for i, k := range batch {
			if k.Refused != "" {
				res.Refused++
				fmt.Fprintf(out, "%q\t-\t-\tREFUSED %s\n", k.Key, k.Refused)
				continue
			}
			next := int64(1) // a tag idserver does not hold starts at 1
			high, err := gets[i].Int64()
			switch {
			case err == redis.Nil:
			case err != nil:
				return fmt.Errorf("GET %q from %s: %w", k.Key, opts.To[0], err)
			default:
				next = high + 1
			}
			state := "ok"
			if next <= k.Value {
				state = "BELOW"
				res.Below++
			}
			res.Checked++
			fmt.Fprintf(out, "%q\t%d\t%d\t%s\n", k.Key, k.Value, next, state)
		}
		return nil
	})
	return res, err
}
