package legacy

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/redis/go-redis/v9"
	"github.com/sony/sonyflake/v2"

	"idserver/internal/systest"
)

// The flags docs/migrating.md maps each legacy layout to, word for word.
var (
	// Twitter's snowflake, bwmarrin/snowflake's defaults and Leaf's
	// snowflake mode: 41 bits of ms since Twitter's epoch, 10 of worker,
	// 12 of sequence.
	twitterFlags = []string{"--epoch", "2010-11-04T01:42:54.657Z", "--time-bits", "41", "--worker-bits", "10", "--seq-bits", "12", "--gene-bits", "0"}
	// ShardingSphere's SNOWFLAKE key generator in a JVM whose default
	// time zone is UTC+8 (Asia/Shanghai).
	shardingSphereFlags = []string{"--epoch", "2016-11-01T00:00:00+08:00", "--time-bits", "41", "--worker-bits", "10", "--seq-bits", "12", "--gene-bits", "0"}
	// sonyflake v2's defaults (start time 2025-01-01): 39 bits of 10 ms,
	// then 8 of sequence and 16 of machine ID, read as worker and field.
	sonyflakeFlags = []string{"--epoch", "2025-01-01T00:00:00Z", "--time-unit", "10ms", "--time-bits", "39", "--worker-bits", "8", "--seq-bits", "16", "--gene-bits", "0"}
	// sonyflake v1's defaults: start time 2014-09-01.
	sonyflakeV1Flags = []string{"--epoch", "2014-09-01T00:00:00Z", "--time-unit", "10ms", "--time-bits", "39", "--worker-bits", "8", "--seq-bits", "16", "--gene-bits", "0"}
)

// twitterEpochMS is Twitter's epoch, which bwmarrin/snowflake and Leaf
// keep: 2010-11-04T01:42:54.657Z.
const twitterEpochMS = 1288834974657

// parts is what DECODE answers.
type parts struct{ TimeMS, Worker, Sequence, Gene int64 }

func decode(t *testing.T, rdb *redis.Client, id int64) parts {
	t.Helper()
	r, err := rdb.Do(context.Background(), "DECODE", id).Result()
	if err != nil {
		t.Fatalf("DECODE %d: %v", id, err)
	}
	m := map[string]any{}
	switch r := r.(type) {
	case map[any]any: // RESP3, which go-redis speaks by default
		for k, v := range r {
			m[k.(string)] = v
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			m[r[i].(string)] = r[i+1]
		}
	}
	return parts{TimeMS: m["time_ms"].(int64), Worker: m["worker"].(int64), Sequence: m["sequence"].(int64), Gene: m["gene"].(int64)}
}

// legacyID is an ID a legacy generator made, and what it says of it.
type legacyID struct {
	id   int64
	want parts
}

// checkDecode starts idserver with flags and has it DECODE every ID.
func checkDecode(t *testing.T, flags []string, ids []legacyID) {
	t.Helper()
	p := systest.StartProc(t, t.TempDir(), flags...)
	rdb := p.Client()
	for _, l := range ids {
		if got := decode(t, rdb, l.id); got != l.want {
			t.Fatalf("DECODE %d with %v: %+v, the generator says %+v", l.id, flags, got, l.want)
		}
	}
}

// bwmarrinIDs makes n IDs on a bwmarrin/snowflake node, and what the
// library reads back from each.
func bwmarrinIDs(t *testing.T, node int64, n int) []legacyID {
	t.Helper()
	g, err := snowflake.NewNode(node)
	if err != nil {
		t.Fatal(err)
	}
	var out []legacyID
	for range n {
		id := g.Generate()
		out = append(out, legacyID{id.Int64(), parts{TimeMS: id.Time(), Worker: id.Node(), Sequence: id.Step()}})
	}
	return out
}

// TestDecodeBwmarrin: IDs of bwmarrin/snowflake with its defaults (the
// Twitter layout), and with its Epoch, NodeBits and StepBits set, decode
// under the flags the docs give: time, node and step.
func TestDecodeBwmarrin(t *testing.T) {
	checkDecode(t, twitterFlags, append(bwmarrinIDs(t, 777, 5000), bwmarrinIDs(t, 1023, 10)...))

	epoch, nodeBits, stepBits := snowflake.Epoch, snowflake.NodeBits, snowflake.StepBits
	t.Cleanup(func() { snowflake.Epoch, snowflake.NodeBits, snowflake.StepBits = epoch, nodeBits, stepBits })
	snowflake.Epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	snowflake.NodeBits, snowflake.StepBits = 6, 16
	ids := bwmarrinIDs(t, 45, 5000)
	// --time-bits is 63 - NodeBits - StepBits.
	checkDecode(t, []string{"--epoch", "2020-01-01T00:00:00Z", "--time-bits", "41", "--worker-bits", "6", "--seq-bits", "16", "--gene-bits", "0"}, ids)
}

// TestDecodeTwitterLeafShardingSphere: IDs made by the formulas of
// Twitter's server (datacenter and worker in the 10 worker bits), Leaf's
// snowflake mode (a worker ID from ZooKeeper, a first sequence of each ms
// drawn from 0..99) and ShardingSphere's SNOWFLAKE generator (its epoch
// midnight 2016-11-01 in the JVM's time zone, its sequence starting at the
// vibration offset) decode under the flags the docs give. The same
// ShardingSphere ID read with the epoch of a JVM in UTC is 8 hours off:
// the zone caveat the docs state.
func TestDecodeTwitterLeafShardingSphere(t *testing.T) {
	ms := time.Now().Add(-time.Minute).UnixMilli()
	twitter := func(ms, datacenter, worker, seq int64) int64 {
		return (ms-twitterEpochMS)<<22 | datacenter<<17 | worker<<12 | seq
	}
	leaf := func(ms, worker, seq int64) int64 { return (ms-twitterEpochMS)<<22 | worker<<12 | seq }
	checkDecode(t, twitterFlags, []legacyID{
		{twitter(ms, 3, 17, 0), parts{TimeMS: ms, Worker: 3<<5 | 17}},
		{twitter(ms, 31, 31, 4095), parts{TimeMS: ms, Worker: 1023, Sequence: 4095}},
		{twitter(ms+1, 0, 1, 7), parts{TimeMS: ms + 1, Worker: 1, Sequence: 7}},
		{leaf(ms, 5, 42), parts{TimeMS: ms, Worker: 5, Sequence: 42}},
		{leaf(ms+2, 900, 99), parts{TimeMS: ms + 2, Worker: 900, Sequence: 99}},
		// docs/migrating.md's example: 2026-12-03T07:00:00Z, datacenter 1, worker 3, sequence 5.
		{2128383732741189637, parts{TimeMS: 1796281200000, Worker: 35, Sequence: 5}},
	})

	shanghai := time.FixedZone("UTC+8", 8*3600)
	ssEpoch := time.Date(2016, 11, 1, 0, 0, 0, 0, shanghai).UnixMilli() // Calendar.set(2016, NOVEMBER, 1) at 00:00 in the JVM's zone
	sharding := func(ms, worker, seq int64) int64 { return (ms-ssEpoch)<<22 | worker<<12 | seq }
	checkDecode(t, shardingSphereFlags, []legacyID{
		{sharding(ms, 0, 1), parts{TimeMS: ms, Worker: 0, Sequence: 1}},
		{sharding(ms+5, 9, 300), parts{TimeMS: ms + 5, Worker: 9, Sequence: 300}},
	})
	utc := append([]string{"--epoch", "2016-11-01T00:00:00Z"}, shardingSphereFlags[2:]...)
	checkDecode(t, utc, []legacyID{
		{sharding(ms, 9, 1), parts{TimeMS: ms + 8*3600_000, Worker: 9, Sequence: 1}},
	})
}

// TestDecodeSonyflake: IDs of sonyflake (v2, with its default start time
// and with v1's) decode under the flags the docs give: time to its 10 ms,
// sonyflake's sequence as the worker, its machine ID as the sequence.
func TestDecodeSonyflake(t *testing.T) {
	for _, tc := range []struct {
		start time.Time // zero: v2's default, 2025-01-01
		flags []string
	}{
		{time.Time{}, sonyflakeFlags},
		{time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC), sonyflakeV1Flags},
	} {
		sf, err := sonyflake.New(sonyflake.Settings{StartTime: tc.start, MachineID: func() (int, error) { return 0xBEEF, nil }})
		if err != nil {
			t.Fatal(err)
		}
		var ids []legacyID
		for range 2000 {
			id, err := sf.NextID()
			if err != nil {
				t.Fatal(err)
			}
			d := sf.Decompose(id)
			ids = append(ids, legacyID{id, parts{TimeMS: sf.ToTime(id).UnixMilli(), Worker: d["sequence"], Sequence: d["machine"]}})
		}
		if !slices.ContainsFunc(ids, func(l legacyID) bool { return l.want.Worker > 0 }) {
			t.Fatal("sonyflake made every ID in a 10 ms of its own (sequence 0): nothing tells its sequence from its machine ID")
		}
		checkDecode(t, tc.flags, ids)
	}
}

// A layout the docs give for a legacy generator starts as a cluster of its
// own: its epoch and widths pass idserver's own checks.
func TestLegacyLayoutsIssue(t *testing.T) {
	for _, flags := range [][]string{twitterFlags, shardingSphereFlags, sonyflakeFlags, sonyflakeV1Flags} {
		p := systest.StartProc(t, t.TempDir(), flags...)
		ids, err := p.Client().Do(context.Background(), "NEXTID", 100).Int64Slice()
		if err != nil || len(ids) != 100 {
			t.Fatalf("%v: NEXTID 100: %v %v", flags, ids, err)
		}
		p.Shutdown()
	}
}
