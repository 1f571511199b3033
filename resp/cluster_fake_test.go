package resp

import (
	"context"
	"sort"
	"sync"

	"idserver/engine"
)

// fakeCluster is a one-node cluster in memory: tags and their high-water.
type fakeCluster struct {
	mu   sync.Mutex
	tags map[string]int64
}

func newFakeCluster() *fakeCluster { return &fakeCluster{tags: map[string]int64{}} }

func (f *fakeCluster) Allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := f.tags[tag] + 1
	f.tags[tag] += n
	return first, f.tags[tag], nil
}

func (f *fakeCluster) Set(ctx context.Context, tag string, v int64, cond string) (int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old, existed := f.tags[tag]
	if (cond == "NX" && existed) || (cond == "XX" && !existed) {
		return old, existed, nil
	}
	if v < old {
		return old, existed, engine.ErrWouldGoBack
	}
	f.tags[tag] = v
	return old, existed, nil
}

func (f *fakeCluster) Get(tag string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.tags[tag]
	return v, ok
}

func (f *fakeCluster) High(ctx context.Context, tag string) (int64, bool, error) {
	v, ok := f.Get(tag)
	return v, ok, nil
}

func (f *fakeCluster) Size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tags)
}

func (f *fakeCluster) ScanTags(cursor uint64, count int) (uint64, []string) {
	f.mu.Lock()
	var all []string
	for tag := range f.tags {
		all = append(all, tag)
	}
	f.mu.Unlock()
	sort.Strings(all)
	if cursor >= uint64(len(all)) {
		return 0, nil
	}
	end := min(cursor+uint64(count), uint64(len(all)))
	next := end
	if end == uint64(len(all)) {
		next = 0
	}
	return next, append([]string(nil), all[cursor:end]...)
}

func (f *fakeCluster) Join(ctx context.Context, node, raftAddr, respAddr string) (int64, int64, int64, error) {
	return 0, 0, 0, nil
}
func (f *fakeCluster) Forget(ctx context.Context, node string) error { return nil }
func (f *fakeCluster) Backup() ([]byte, error)                       { return []byte("{}"), nil }
func (f *fakeCluster) Leader() (string, bool)                        { return "127.0.0.1:1", true }
func (f *fakeCluster) Info() [][2]string {
	return [][2]string{{"node_id", "n1"}, {"role", "Leader"}, {"members", "1"}}
}
