package importer

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// progress counts an import and, when it has a writer (a terminal), prints
// a line of counts, rate and time left twice a second.
type progress struct {
	read, imported, refused atomic.Int64
	total                   int64 // -1 when unknown
	out                     io.Writer
	start                   time.Time
	done                    chan struct{}
	wg                      sync.WaitGroup
}

func newProgress(out io.Writer, total int64) *progress {
	p := &progress{total: total, out: out, start: time.Now(), done: make(chan struct{})}
	if out == nil {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				fmt.Fprintf(p.out, "\r\033[K%s", p.line(time.Since(p.start)))
			case <-p.done:
				fmt.Fprintf(p.out, "\r\033[K%s\n", p.line(time.Since(p.start)))
				return
			}
		}
	}()
	return p
}

// line is the progress line after elapsed.
func (p *progress) line(elapsed time.Duration) string {
	read, imported, refused := p.read.Load(), p.imported.Load(), p.refused.Load()
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(imported) / s
	}
	s := fmt.Sprintf("read %d, imported %d, refused %d, %.0f/s", read, imported, refused, rate)
	if p.total >= 0 {
		s = fmt.Sprintf("read %d of %d, imported %d, refused %d, %.0f/s", read, p.total, imported, refused, rate)
		if rate > 0 && p.total > imported+refused {
			left := time.Duration(float64(p.total-imported-refused) / rate * float64(time.Second))
			s += fmt.Sprintf(", at most %v left", left.Round(time.Second))
		}
	}
	return s
}

// stop prints the last line and ends the printing goroutine.
func (p *progress) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	p.wg.Wait()
}
