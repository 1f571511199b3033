package cluster

// MSET: floors of many tags in one log entry. Floors only raise, so unlike
// a SET nothing needs asking what was issued: the leader holds the tags,
// fences every member, and commits one entryFloors over the revs it read.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"idserver/persist"
)

// Bounds on one entryFloors: an MSET with more pairs, or more bytes of
// tags, is committed as several entries, in order.
const (
	maxFloorsPerEntry     = 1000
	maxFloorBytesPerEntry = 64 << 10
)

// floor is one pair of an MSET: every later value of Tag is above Value.
type floor struct {
	Tag   string `json:"tag"`
	Value int64  `json:"value"`
}

// MSet raises each of tags to at least its value, values[i] for tags[i]: a tag below it (or new) is
// raised, one at or above it is left as it is, and every value of each
// tag handed out after MSet returns, on every member, is above its value.
// Values must not be negative. Floors are committed in entries of at most
// maxFloorsPerEntry pairs (and maxFloorBytesPerEntry bytes of tags), each
// all or nothing and each confirmed by every member before the next; an
// error names how many pairs were applied before it (a retry of the whole
// MSET is safe: a floor applied twice changes nothing). A tag past the
// bound on tags refuses its whole entry (ErrTagLimit); a member of a build
// that does not know MSET refuses it before anything changes. Each entry
// has Timing.Request to itself; ctx bounds the whole.
func (c *Cluster) MSet(ctx context.Context, tags []string, values []int64) error {
	if len(tags) != len(values) {
		return fmt.Errorf("MSET: %d tags and %d values", len(tags), len(values))
	}
	floors := make([]floor, len(tags))
	for i, tag := range tags {
		floors[i] = floor{tag, values[i]}
	}
	for done := 0; done < len(floors); {
		n := floorsInEntry(floors[done:])
		ectx, cancel := context.WithTimeout(ctx, c.timing.Request)
		err := c.floorsEntry(ectx, floors[done:done+n])
		cancel()
		if err != nil {
			if done == 0 {
				return err
			}
			return fmt.Errorf("%w (the first %d of %d pairs are applied, the rest are not)", err, done, len(floors))
		}
		done += n
	}
	return nil
}

// floorsInEntry is how many of floors, from the first, one entry takes.
func floorsInEntry(floors []floor) int {
	size := 0
	for i, f := range floors {
		size += len(f.Tag)
		if i == maxFloorsPerEntry || (i > 0 && size > maxFloorBytesPerEntry) {
			return i
		}
	}
	return len(floors)
}

// floorsEntry commits one entry's floors, on the leader or through it.
func (c *Cluster) floorsEntry(ctx context.Context, floors []floor) error {
	if !c.IsLeader() {
		_, err := c.toLeader(ctx, &request{Op: opFloors, Floors: floors})
		return err
	}
	return c.floorsLocal(ctx, floors)
}

// floorsLocal runs one entry of an MSET on the leader: SET's steps without
// the ask and the bound, which only a SET that may lower needs.
//
//  1. Allocations of the tags wait on this leader until it ends (a hold;
//     tags are held in sorted order, so two MSETs cannot hold each other).
//  2. It reads each tag's rev.
//  3. It fences every member for every tag: each drops the tags' buffered
//     values and allocations in flight. A member that does not answer
//     fails the MSET before anything is committed.
//  4. It commits entryFloors over the revs read: an allocation committed
//     since moves a rev, and the entry changes nothing and starts over.
//  5. Every member confirms it applied the entry.
//
// A value allocated before the commit was either dropped by the fence or
// moved a rev; one allocated after it is above the floors.
func (c *Cluster) floorsLocal(ctx context.Context, floors []floor) error {
	for _, f := range floors {
		if f.Value < 0 {
			return fmt.Errorf("MSET %s %d: a tag's values are not negative (nothing changed)", f.Tag, f.Value)
		}
	}
	if err := c.caughtUp(); err != nil {
		return err
	}
	if err := c.waitDeparted(ctx); err != nil {
		return err
	}
	tags := make([]string, len(floors))
	for i, f := range floors {
		tags[i] = f.Tag
	}
	slices.Sort(tags)
	tags = slices.Compact(tags)
	what := fmt.Sprintf("MSET of %d tags (%s ...)", len(tags), floors[0].Tag)
	for _, tag := range tags {
		release, err := c.hold(ctx, tag)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
		defer release()
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		revs := c.fsm.tagRevs(tags)
		if err := c.fenceTags(ctx, tags, what+" (nothing committed)"); err != nil {
			return err
		}
		e := newEntry(entryFloors).uvarint(uint64(len(floors)))
		for _, f := range floors {
			e = e.string(f.Tag).varint(f.Value).uvarint(revs[f.Tag])
		}
		resp, index, err := c.applyIndex(e)
		if err != nil {
			return err
		}
		if err, _ := resp.(error); err != nil {
			if errors.Is(err, errMoved) && attempt < attempts {
				continue
			}
			if errors.Is(err, errMoved) {
				return fmt.Errorf("%w: %s: allocations moved its tags %d times while it was checked (nothing committed); retrying it is safe",
					ErrUnconfirmed, what, attempts)
			}
			return err
		}
		return c.confirm(ctx, index, what+" (committed)")
	}
}

// fenceTags runs OnFence for each of tags on every member. A member of a
// build without MSET does not know the request and fails it.
func (c *Cluster) fenceTags(ctx context.Context, tags []string, what string) error {
	return c.everyMember(ctx, what, "dropped its buffered values", &request{Op: opFenceTags, Tags: tags}, nil,
		func(context.Context) (*response, error) { return c.fenceTagsLocal(tags), nil })
}

// everyMemberKnowsFloors asks every member to fence no tag: each that
// answers applies entryFloors and entryMaxTags.
func (c *Cluster) everyMemberKnowsFloors(ctx context.Context) error {
	return c.fenceTags(ctx, nil, "asking whether every member knows MSET and --max-tags")
}

func (c *Cluster) fenceTagsLocal(tags []string) *response {
	for _, tag := range tags {
		c.fenceLocal(tag)
	}
	return &response{Boot: c.boot}
}

// tagRevs is each tag's rev (0 for a tag the state does not hold).
func (f *fsm) tagRevs(tags []string) map[string]uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	revs := make(map[string]uint64, len(tags))
	for _, tag := range tags {
		t, _ := f.stored(tag)
		revs[tag] = t.Rev
	}
	return revs
}

// floorPair is one pair of an entryFloors.
type floorPair struct {
	tag string
	v   int64
	rev uint64
}

// applyFloors raises each tag to at least its v, all or nothing: when a
// tag's rev is not the one the leader read (an allocation or SET moved it
// since its fence), or the new tags pass the bound on tags, nothing
// changes. A tag at or above its v is left as it is; a new one is created
// at v (above TagBase as any new tag). It answers nil or the refusal.
func (f *fsm) applyFloors(d *decoder, b *persist.Batch, _ *changes) any {
	f.meta.Shapes = max(f.meta.Shapes, 1)
	count := d.uvarint()
	pairs := make([]floorPair, 0, min(count, maxFloorsPerEntry))
	for range count {
		pairs = append(pairs, floorPair{tag: d.string(), v: d.varint(), rev: d.uvarint()})
	}
	d.end()
	created := map[string]bool{}
	for _, p := range pairs {
		t, existed := f.stored(p.tag)
		if t.Rev != p.rev {
			return errMoved
		}
		if p.v < 0 {
			return fmt.Errorf("%s: a tag's values are not negative", p.tag)
		}
		if !existed {
			created[p.tag] = true
		}
	}
	if err := f.tagRoom(len(created)); err != nil {
		return err
	}
	for _, p := range pairs {
		t, existed := f.tagOrBase(p.tag)
		if existed && p.v <= t.high() {
			continue
		}
		t.Floor = max(t.Floor, p.v)
		t.Rev++
		f.putTag(b, p.tag, t, existed)
	}
	return nil
}
