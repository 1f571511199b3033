// Package importer brings counters from another issuer into idserver
// without a value going back: a running Redis (INCR keys by pattern), a
// PostgreSQL sequence, or a MySQL/MariaDB table shaped like Leaf's
// leaf_alloc. Each counter lands as a floor (every later value of the tag
// is above it) through idserver's MSET, one Raft entry per batch, over a
// few pipelined connections. A floor only raises a tag, so an import can
// be run again, and a second pass after the old writers stop finishes a
// live one.
//
// A value that is not an integer, negative, or above 2^63-1 is refused
// key by key, with the key named; the other keys are imported.
package importer
