package resp

import "context"

// MSet raises each tag to at least its value, as the cluster does.
func (f *fakeCluster) MSet(ctx context.Context, tags []string, values []int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, tag := range tags {
		f.tags[tag] = max(f.tags[tag], values[i])
	}
	return nil
}
