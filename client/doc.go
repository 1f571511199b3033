// Package idclient is a Go client for idserver that hands out IDs without
// a network round trip per ID. It is built on go-redis v9.
//
//	c, err := idclient.New(idclient.Options{Addrs: []string{"10.0.0.1:6380", "10.0.0.2:6380", "10.0.0.3:6380"}})
//	...
//	defer c.Close()
//	id, err := c.Next(ctx)                      // a snowflake ID (NEXTIDRUNS)
//	order, err := c.Gene(ctx, "buyer-42")       // an ID on buyer-42's shard (GENEID)
//	n, err := c.Counter("orders").Next(ctx)     // the tag's next segment value (NEXTSEG)
//	u, err := c.UUIDv7(ctx)                     // an RFC 9562 UUIDv7 (UUIDV7)
//
// # Levels
//
// Each Sequence (snowflake IDs, the IDs of one gene, a tag's values) has
// the same levels, each switched by Options.Buffer so that the benchmarks
// in bench/ measure what it buys:
//
//  1. Batch: one request fetches many values (NEXTIDRUNS n, GENEIDRUNS g
//     n, NEXTSEG tag n). Snowflake IDs come as runs [first, last] of
//     consecutive IDs (a few per batch: within a millisecond a node's
//     NEXTIDs are consecutive), gene IDs as runs of IDs 2^gene-bits apart
//     (a gene's IDs within a time unit), and every buffer level below holds
//     runs, so an ID costs neither a RESP integer to parse nor a slot in a
//     slice; Buffer.NoRuns asks NEXTID n (GENEID g n), an array of IDs,
//     instead, and a node that does not know NEXTIDRUNS (GENEIDRUNS) gets
//     the list command from then on.
//  2. Process buffer with a low-water mark: when the buffer falls below
//     Buffer.Prefetch of a batch, the next batch is requested in the
//     background, so callers almost never wait.
//  3. Singleflight: callers that find the buffer empty wait on one request
//     between them, which fetches a whole batch, more than any one asked.
//  4. Adaptive batch: the batch doubles while batches last under half of
//     Buffer.Period and halves past four Periods (between Batch and
//     MaxBatch), following the rate as the server's segments do.
//  5. Per-P caches: each P takes Buffer.Local values at a time (as runs)
//     into a cache kept in a sync.Pool (per P), so most takes touch no
//     mutex and read no clock.
//
// # Safety
//
// A value is handed out at most once: it leaves the process buffer under
// its lock into one caller or one per-P cache, and nothing is ever put
// back, not after a request fails and not at Close (values a sync.Pool
// drops at a GC are lost: gaps, never repeats). After Close returns, every
// call answers ErrClosed.
//
// Snowflake and gene IDs are dropped once Options.MaxAge (1s by default)
// has passed since they were requested: an ID's time says when the server
// issued it, and a buffered ID handed out later carries an older time. So
// the time in an ID from this client is at most MaxAge plus a round trip
// older than the moment it is used; choose MaxAge by how far your readers
// of that time can tolerate. The per-P caches check MaxAge against a
// coarse clock that the Client refreshes every MaxAge/100 (between 1ms and
// 100ms) and at every take from the process buffer, so the bound holds to
// within that tick (longer only if the process is starved of CPU); the
// process buffer checks it against the real clock.
//
// Server errors (TRYAGAIN, CLOCKBACK, LOADING, a dead connection) move the
// request to the next node in Options.Addrs; an error reaches the caller
// only when no buffered value is left and every node failed. A caller
// waiting for a request returns when its context ends.
//
// # Order
//
// The server issues one node's values in increasing order. With per-P
// caches on (the default), each P hands out an increasing run of values,
// but two goroutines' values interleave: a value taken later on one P may
// be below one taken earlier on another. Buffer.Strict turns the per-P
// caches off, so values leave in the order they were taken from the
// process buffer, strictly increasing; after a failover, values from the
// new node at or below the last one handed out are dropped, so a Strict
// sequence keeps increasing across nodes too.
//
// # Cluster, AUTH, TLS
//
// Options.Addrs lists any members of a cluster; every node answers every
// command. Options.Redis is the go-redis template for each node (Username,
// Password, TLSConfig with the server's certificate in RootCAs, timeouts).
package idclient
