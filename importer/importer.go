package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Source is where counters come from.
type Source interface {
	// Name says what the source is, for messages; it holds no password.
	Name() string
	// Total is how many counters the source holds at most, or -1 when
	// it cannot tell cheaply. Progress reads it for the time left.
	Total(ctx context.Context) int64
	// Read passes every counter it selects to emit, in batches of at
	// most n, and returns at the end, at its first error, or at emit's.
	Read(ctx context.Context, n int, emit func([]Counter) error) error
	// Close ends the source's connections.
	Close() error
}

// Options say where counters land and how.
type Options struct {
	// To are RESP addresses (host:port) of idserver members; a write that
	// fails is tried again on the next one.
	To       []string
	Password string
	// Margin is added to every value: the room a live pass leaves for
	// the values the old writers still hand out until they stop.
	Margin int64
	// Timeout bounds how long one batch is tried again (a member down, a
	// leader election) before the import gives up.
	Timeout time.Duration
	// Rate caps the counters read per second; 0 does not cap.
	Rate int
	// Conns is how many connections write to idserver (default 4), Batch
	// how many floors one MSET holds (at most and by default MaxBatch), Depth
	// how many MSETs one connection pipelines (default 4).
	Conns, Batch, Depth int
	// Progress, when not nil, receives a progress line twice a second
	// (a terminal): counts, rate, time left.
	Progress io.Writer
}

func (o *Options) defaults() {
	if o.Conns <= 0 {
		o.Conns = 4
	}
	if o.Batch <= 0 || o.Batch > MaxBatch {
		o.Batch = MaxBatch
	}
	if o.Depth <= 0 {
		o.Depth = 4
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.Rate > 0 {
		// The source is read a batch at a time: a tenth of a second's
		// worth keeps the reads close to the rate, not a burst of a batch.
		o.Batch = max(1, min(o.Batch, o.Rate/10))
	}
}

// ErrNotIdserver is a --to address that answers but is not idserver: a
// plain Redis takes an MSET too, and the import would seem to succeed.
var ErrNotIdserver = errors.New("not idserver")

// checkTargets asks each address of to that answers within timeout for
// INFO server, and refuses one without idserver's idserver_version line.
// An address that does not answer is left to the writers' retries.
func checkTargets(ctx context.Context, opts Options) error {
	for _, addr := range opts.To {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: opts.Password, Protocol: 2,
			DisableIdentity: true, MaxRetries: -1, PoolSize: 1, DialTimeout: 2 * time.Second, ReadTimeout: opts.Timeout})
		text, err := c.Info(ctx, "server").Result()
		c.Close()
		switch {
		case err != nil && strings.Contains(err.Error(), "unauthenticated"):
			return fmt.Errorf("%w: %s asks for a password (--password or IDSERVER_REQUIREPASS)", ErrWrite, addr)
		case err != nil && permanent(err):
			return fmt.Errorf("%w: %s: %v", ErrWrite, addr, err)
		case err == nil && !strings.Contains(text, "idserver_version:"):
			return fmt.Errorf("%w: %s answers, but its INFO server has no idserver_version: --to names idserver's members", ErrNotIdserver, addr)
		}
	}
	return nil
}

// MaxBatch is the most floors one MSET carries: idserver takes at most
// 1024 arguments in a command, and one Raft entry holds them all.
const MaxBatch = 511

// Result is what an import did.
type Result struct {
	Read     int64     // counters the source passed
	Imported int64     // floors every member applied
	Refused  []Refusal // keys left out, each with why
}

// ErrWrite wraps an idserver error that outlasted Options.Timeout.
var ErrWrite = errors.New("idserver did not take the floors")

// Run reads every counter src selects and lands it in idserver as a floor
// (its value plus Options.Margin), MSET by MSET. A refused key is
// reported in the Result and the rest go on. An error of the source or of
// idserver stops the import once the batches in flight are settled; the
// error says how many floors landed, and a rerun lands them all (a floor
// applied twice changes nothing).
func Run(ctx context.Context, src Source, opts Options) (Result, error) {
	opts.defaults()
	var res Result
	if err := checkTargets(ctx, opts); err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var refusedMu sync.Mutex
	prog := newProgress(opts.Progress, src.Total(ctx))
	defer prog.stop()

	batches := make(chan []Counter, opts.Conns*opts.Depth)
	var writeErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for i := range opts.Conns {
		w := newWriter(opts, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.close()
			if err := w.run(ctx, batches, prog); err != nil {
				errOnce.Do(func() { writeErr = err; cancel() })
			}
		}()
	}

	start := time.Now()
	readErr := src.Read(ctx, opts.Batch, func(batch []Counter) error {
		floors := make([]Counter, 0, len(batch))
		for _, c := range batch {
			if c.Refused == "" {
				c.Refused = checkKey(c.Key)
			}
			if c.Refused == "" {
				c.Value, c.Refused = addMargin(c.Value, opts.Margin)
			}
			if c.Refused != "" {
				refusedMu.Lock()
				res.Refused = append(res.Refused, Refusal{c.Key, c.Refused})
				refusedMu.Unlock()
				prog.refused.Add(1)
				continue
			}
			floors = append(floors, c)
		}
		res.Read += int64(len(batch))
		prog.read.Add(int64(len(batch)))
		if len(floors) > 0 {
			select {
			case batches <- floors:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return pace(ctx, start, res.Read, opts.Rate)
	})
	close(batches)
	wg.Wait()
	res.Imported = prog.imported.Load()
	switch {
	case writeErr != nil:
		return res, fmt.Errorf("%w (%s)", writeErr, stoppedAt(writeErr, res.Imported))
	case readErr != nil:
		return res, fmt.Errorf("reading %s: %w (%s)", src.Name(), readErr, stoppedAt(readErr, res.Imported))
	}
	return res, nil
}

// stoppedAt says what an import that stopped on err leaves and how to go
// on: a floor that landed lands again unchanged, so a rerun is safe, and
// it lands every floor once err's cause is mended.
func stoppedAt(err error, imported int64) string {
	mend := "once the cause is mended"
	if strings.Contains(err.Error(), "tag limit reached") {
		mend = "once --max-tags on every node holds the source's keys"
	}
	return fmt.Sprintf("%d floors landed before it; a rerun lands every one %s", imported, mend)
}

// pace waits until read counters at rate per second have taken their time
// since start.
func pace(ctx context.Context, start time.Time, read int64, rate int) error {
	if rate <= 0 {
		return nil
	}
	due := start.Add(time.Duration(float64(read) / float64(rate) * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writer is one connection's worth of MSETs, to one member at a time.
type writer struct {
	opts    Options
	at      int // index in opts.To of the member written to
	clients map[int]*redis.Client
}

func newWriter(opts Options, i int) *writer {
	return &writer{opts: opts, at: i % len(opts.To), clients: map[int]*redis.Client{}}
}

func (w *writer) client() *redis.Client {
	c, ok := w.clients[w.at]
	if !ok {
		c = redis.NewClient(&redis.Options{Addr: w.opts.To[w.at], Password: w.opts.Password, Protocol: 2,
			DisableIdentity: true, MaxRetries: -1, PoolSize: 1, DialTimeout: 5 * time.Second,
			ReadTimeout: w.opts.Timeout, WriteTimeout: w.opts.Timeout})
		w.clients[w.at] = c
	}
	return c
}

func (w *writer) close() {
	for _, c := range w.clients {
		c.Close()
	}
}

// run writes batches until the channel closes or ctx ends: up to Depth
// batches pipelined at a time, tried again on the next member until they
// land or Timeout passes.
func (w *writer) run(ctx context.Context, batches <-chan []Counter, prog *progress) error {
	for {
		var group [][]Counter
		b, ok := <-batches
		if !ok {
			return nil
		}
		group = append(group, b)
	more:
		for len(group) < w.opts.Depth {
			select {
			case b, ok := <-batches:
				if !ok {
					break more
				}
				group = append(group, b)
			default:
				break more
			}
		}
		if err := w.land(ctx, group, prog); err != nil {
			return err
		}
	}
}

// land pipelines one MSET per batch of group and tries the ones that
// failed again until each lands or Timeout passes since the first failure.
func (w *writer) land(ctx context.Context, group [][]Counter, prog *progress) error {
	var failedSince time.Time
	backoff := 50 * time.Millisecond
	for {
		pipe := w.client().Pipeline()
		cmds := make([]*redis.Cmd, len(group))
		for i, batch := range group {
			args := make([]any, 0, 1+2*len(batch))
			args = append(args, "MSET")
			for _, c := range batch {
				args = append(args, c.Key, strconv.FormatInt(c.Value, 10))
			}
			cmds[i] = pipe.Do(ctx, args...)
		}
		_, execErr := pipe.Exec(ctx)
		var left [][]Counter
		var lastErr error
		for i, cmd := range cmds {
			// A batch has landed only when idserver answered OK: a failed
			// dial leaves the commands of a pipeline without a reply or an
			// error of their own, the pipeline's error says why.
			err := cmd.Err()
			if err == nil && cmd.Val() == nil {
				err = execErr
			}
			if reply, _ := cmd.Val().(string); err == nil && reply != "OK" {
				err = fmt.Errorf("MSET answered %v", cmd.Val())
			}
			if err != nil {
				left, lastErr = append(left, group[i]), err
				continue
			}
			prog.imported.Add(int64(len(group[i])))
		}
		if len(left) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(lastErr) {
			return fmt.Errorf("%w: MSET to %s: %v", ErrWrite, w.opts.To[w.at], lastErr)
		}
		if failedSince.IsZero() {
			failedSince = time.Now()
		} else if time.Since(failedSince) > w.opts.Timeout {
			return fmt.Errorf("%w: MSET to %s: %v (tried again for %v)", ErrWrite, w.opts.To[w.at], lastErr, w.opts.Timeout)
		}
		group = left
		w.at = (w.at + 1) % len(w.opts.To)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// permanent reports whether err is a refusal that trying again cannot
// change (a password, a protocol or argument error) rather than a member
// down, an election or a timeout.
func permanent(err error) bool {
	msg := err.Error()
	for _, p := range []string{"NOAUTH", "WRONGPASS", "ERR Protocol error", "ERR wrong number", "ERR value is not", "ERR unknown command", "ERR tag"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
