package cluster

import (
	"encoding/json"
	"testing"
)

// TestTagJSONKeepsBytes: requests, allocation items and snapshots carry tag
// names of any bytes through JSON, and read what an older node wrote.
func TestTagJSONKeepsBytes(t *testing.T) {
	for _, tag := range []string{"plain", "é", "\xff", "\xfe", "a\xffb", "\x00", ""} {
		b, err := json.Marshal(request{Seq: 7, Tag: tag, Items: []allocItem{{Tag: tag, N: 3}},
			Tags: []string{"x", tag, "\xfd"}, Floors: []floor{{Tag: tag, Value: 9}}})
		if err != nil {
			t.Fatal(err)
		}
		var r request
		if err := json.Unmarshal(b, &r); err != nil || r.Tag != tag || r.Seq != 7 || len(r.Items) != 1 || r.Items[0].Tag != tag || r.Items[0].N != 3 ||
			len(r.Tags) != 3 || r.Tags[0] != "x" || r.Tags[1] != tag || r.Tags[2] != "\xfd" ||
			len(r.Floors) != 1 || r.Floors[0].Tag != tag || r.Floors[0].Value != 9 {
			t.Errorf("request with tag %q: %s reads back as %+v (%v)", tag, b, r, err)
		}
	}
	st := snapshotState{Tags: map[string]tagState{"plain": {MaxID: 1}, "\xff": {MaxID: 2}, "\xfe": {MaxID: 3}}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back snapshotState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Tags) != 3 || back.Tags["\xff"].MaxID != 2 || back.Tags["\xfe"].MaxID != 3 || back.Tags["plain"].MaxID != 1 {
		t.Errorf("snapshot %s reads back as %+v", b, back.Tags)
	}
	// What a node without the bytes fields wrote, and what it reads of ours.
	var old request
	if err := json.Unmarshal([]byte(`{"seq":1,"op":2,"tag":"orders","items":[{"Tag":"orders","N":5}]}`), &old); err != nil ||
		old.Tag != "orders" || old.Items[0].Tag != "orders" || old.Items[0].N != 5 {
		t.Errorf("an older request reads as %+v (%v)", old, err)
	}
	var oldSnap snapshotState
	if err := json.Unmarshal([]byte(`{"meta":{},"tags":{"orders":{"max_id":9}}}`), &oldSnap); err != nil || oldSnap.Tags["orders"].MaxID != 9 {
		t.Errorf("an older snapshot reads as %+v (%v)", oldSnap, err)
	}
	var plain struct {
		Tags map[string]tagState `json:"tags"`
	}
	if err := json.Unmarshal(b, &plain); err != nil || len(plain.Tags) != 1 || plain.Tags["plain"].MaxID != 1 {
		t.Errorf("an older reader sees %+v in %s, want only the UTF-8 tag (%v)", plain.Tags, b, err)
	}
}
