package cluster

// The bound on the number of tags (--max-tags). The state machine decides
// it where a tag is created (an allocation, a SET, an MSET of a tag it does
// not hold), against a bound the log itself carries (entryMaxTags), so
// every member refuses the same new tag and none disagrees. A cluster whose
// leader runs with the default bound commits no entry, so that a member
// rolled back to a build before the bound meets none in its log.

import (
	"context"
	"fmt"

	"idserver/engine"
	"idserver/persist"
)

// DefaultMaxTags is the bound on the number of tags of a cluster whose log
// carries no other (docs/operations.md, --max-tags). Tags live in Pebble
// and only a bounded hot set of them holds buffers, so 200,000 tags take
// well under 100 MiB of resident memory (bench/RESULTS.md, "tags") and
// leave a 1 GiB pod room for the rest. The state machine decides with it:
// a build with another default would refuse other tags than its peers.
const DefaultMaxTags = 200_000

// ErrTagLimit: the command would create a tag past the cluster's bound on
// the number of tags (--max-tags). Nothing changed; tags that exist keep
// working.
var ErrTagLimit = engine.ErrTagLimit

// tagRoom refuses newTags more tags past the bound. The caller holds the
// state machine's lock.
func (f *fsm) tagRoom(newTags int) error {
	bound := f.bound()
	if bound == 0 || f.meta.TagCount+newTags <= bound {
		return nil
	}
	if newTags > 1 {
		return fmt.Errorf("%w: --max-tags %d, and the cluster holds %d tags, to which this command would add %d: none of them is made, "+
			"existing tags keep working (raise --max-tags on every node to create more)", ErrTagLimit, bound, f.meta.TagCount, newTags)
	}
	return fmt.Errorf("%w: --max-tags %d, and the cluster holds %d tags: a new tag is refused, existing tags keep working (raise --max-tags on every node to create more)",
		ErrTagLimit, bound, f.meta.TagCount)
}

// shapesNeeded is the log shape (logShapes) a node must read to follow
// this state: 1 once it is of the compact format or its log has held an
// MSET's or a bound's entry (meta.Shapes; a bound committed before the
// state kept Shapes shows as MaxTags), else 0 (every build reads it). It
// asks for the log's lifetime, not the entries still in it: a joiner
// that would be sent only a snapshot is refused too.
func (f *fsm) shapesNeeded() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.meta.TagFormat >= tagFormatCompact || f.meta.MaxTags != 0 {
		return max(f.meta.Shapes, 1)
	}
	return f.meta.Shapes
}

// bound is the bound the state holds, 0 for none. The caller holds the
// state machine's lock.
func (f *fsm) bound() int {
	switch {
	case f.meta.MaxTags == 0:
		return DefaultMaxTags
	case f.meta.MaxTags < 0:
		return 0
	}
	return f.meta.MaxTags
}

func (f *fsm) applyMaxTags(d *decoder, b *persist.Batch, _ *changes) any {
	n := d.uvarint()
	d.end()
	f.meta.Shapes = max(f.meta.Shapes, 1)
	f.meta.MaxTags = int(min(n, 1<<31))
	if n == 0 {
		f.meta.MaxTags = -1
	}
	return nil
}

// maxTags is the bound the state holds, 0 for none.
func (f *fsm) maxTags() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.bound()
}

// MaxTags is the cluster's bound on the number of tags as this node has
// applied it (0: none). It follows the leader's Config.MaxTags once that
// leader has committed it.
func (c *Cluster) MaxTags() int { return c.fsm.maxTags() }

// proposeMaxTags commits this leader's Config.MaxTags when the state holds
// another bound. It waits until every member applies entryMaxTags: a
// member of an older build would stop at an entry type it does not know,
// so the bound stays as it is while one is a member.
func (c *Cluster) proposeMaxTags() {
	if c.fsm.maxTags() == c.cfg.MaxTags || c.caughtUp() != nil {
		return
	}
	if err := c.everyMemberKnowsFloors(context.Background()); err != nil {
		c.log.Debug("the bound on tags waits for every member to know it", "max_tags", c.cfg.MaxTags, "err", err)
		return
	}
	if _, err := c.apply(newEntry(entryMaxTags).uvarint(uint64(c.cfg.MaxTags))); err != nil {
		c.log.Warn("cannot store the bound on tags yet", "max_tags", c.cfg.MaxTags, "err", err)
		return
	}
	c.log.Info("the cluster's bound on tags", "max_tags", c.cfg.MaxTags)
}
