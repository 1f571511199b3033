// Package resp is idserver's wire: a serve loop per connection whose frame
// parser is also the guard (the limits of docs/guarantees.md, promise 5), a command table with
// Redis-style arity checks, runs of the same ID command answered from one
// engine call, and the replies, in RESP2 or (after HELLO 3) RESP3, encoded
// by redcon's Append functions.
//
// It knows nothing of Raft or Pebble: it consumes the small IDSource
// interface, which the engine implements.
package resp
