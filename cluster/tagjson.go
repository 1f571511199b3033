package cluster

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// A tag name is any bytes, and JSON strings are Unicode: encoding/json
// writes each byte that is not UTF-8 as U+FFFD, so that two tags would
// become one. Node-to-node requests and snapshots are JSON, so each
// carries a name that is not valid UTF-8 in a field of its own, as bytes
// (base64), and a valid name where it always stood. A reader that does not
// know the extra field sees no such tag rather than a wrong one.

// MarshalJSON writes r with a tag that is not UTF-8 in "tag_bytes", and
// each such name of Tags in "tags_bytes" by its index (its place in Tags
// left empty).
func (r request) MarshalJSON() ([]byte, error) {
	type plain request
	w := struct {
		plain
		TagBytes  []byte         `json:"tag_bytes,omitempty"`
		TagsBytes map[int][]byte `json:"tags_bytes,omitempty"`
	}{plain: plain(r)}
	if !utf8.ValidString(r.Tag) {
		w.Tag, w.TagBytes = "", []byte(r.Tag)
	}
	for i, tag := range r.Tags {
		if utf8.ValidString(tag) {
			continue
		}
		if w.TagsBytes == nil {
			w.Tags = append([]string(nil), r.Tags...)
			w.TagsBytes = map[int][]byte{}
		}
		w.Tags[i], w.TagsBytes[i] = "", []byte(tag)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *request) UnmarshalJSON(b []byte) error {
	type plain request
	var w struct {
		plain
		TagBytes  []byte         `json:"tag_bytes,omitempty"`
		TagsBytes map[int][]byte `json:"tags_bytes,omitempty"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = request(w.plain)
	if w.TagBytes != nil {
		r.Tag = string(w.TagBytes)
	}
	for i, name := range w.TagsBytes {
		if i < 0 || i >= len(r.Tags) {
			return fmt.Errorf("tags_bytes index %d outside the %d tags", i, len(r.Tags))
		}
		r.Tags[i] = string(name)
	}
	return nil
}

// MarshalJSON writes f with a tag that is not UTF-8 in "tag_bytes".
func (f floor) MarshalJSON() ([]byte, error) {
	type plain floor
	w := struct {
		plain
		TagBytes []byte `json:"tag_bytes,omitempty"`
	}{plain: plain(f)}
	if !utf8.ValidString(f.Tag) {
		w.Tag, w.TagBytes = "", []byte(f.Tag)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *floor) UnmarshalJSON(b []byte) error {
	type plain floor
	var w struct {
		plain
		TagBytes []byte `json:"tag_bytes,omitempty"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*f = floor(w.plain)
	if w.TagBytes != nil {
		f.Tag = string(w.TagBytes)
	}
	return nil
}

// MarshalJSON writes a with a tag that is not UTF-8 in "TagBytes".
func (a allocItem) MarshalJSON() ([]byte, error) {
	type plain allocItem
	w := struct {
		plain
		TagBytes []byte `json:",omitempty"`
	}{plain: plain(a)}
	if !utf8.ValidString(a.Tag) {
		w.Tag, w.TagBytes = "", []byte(a.Tag)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *allocItem) UnmarshalJSON(b []byte) error {
	type plain allocItem
	var w struct {
		plain
		TagBytes []byte `json:",omitempty"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*a = allocItem(w.plain)
	if w.TagBytes != nil {
		a.Tag = string(w.TagBytes)
	}
	return nil
}

// snapshotJSON is snapshotState as JSON: tags whose names are not UTF-8
// are in "tag_bytes", keyed by the base64 of their names.
type snapshotJSON struct {
	Meta     meta                `json:"meta"`
	Tags     map[string]tagState `json:"tags"`
	TagBytes map[string]tagState `json:"tag_bytes,omitempty"`
}

// MarshalJSON writes s as snapshotJSON.
func (s snapshotState) MarshalJSON() ([]byte, error) {
	w := snapshotJSON{Meta: s.Meta, Tags: s.Tags}
	for tag, t := range s.Tags {
		if utf8.ValidString(tag) {
			continue
		}
		if w.TagBytes == nil {
			w.Tags = make(map[string]tagState, len(s.Tags))
			for tag, t := range s.Tags {
				if utf8.ValidString(tag) {
					w.Tags[tag] = t
				}
			}
			w.TagBytes = map[string]tagState{}
		}
		w.TagBytes[base64.StdEncoding.EncodeToString([]byte(tag))] = t
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *snapshotState) UnmarshalJSON(b []byte) error {
	var w snapshotJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	s.Meta, s.Tags = w.Meta, w.Tags
	for key, t := range w.TagBytes {
		name, err := base64.StdEncoding.DecodeString(key)
		if err != nil {
			return fmt.Errorf("snapshot: tag_bytes key %q: %v", key, err)
		}
		if s.Tags == nil {
			s.Tags = map[string]tagState{}
		}
		s.Tags[string(name)] = t
	}
	return nil
}
