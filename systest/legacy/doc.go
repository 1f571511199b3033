// Package legacy tests idserver beside the snowflake generators it
// replaces (docs/migrating.md, "From a snowflake library"): DECODE of IDs
// made by bwmarrin/snowflake and sonyflake themselves, and by the formulas
// of Twitter's, Leaf's and ShardingSphere's generators, under the flags the
// docs map each layout to; --above-id against their IDs; reserved worker
// IDs beside a legacy generator that keeps running. It is a module of its
// own so that idserver's module does not require the legacy libraries.
package legacy
