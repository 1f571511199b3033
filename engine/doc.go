// Package engine issues snowflake and gene IDs.
//
// It is pure logic: the wall clock is injected (Clock) and the durable
// high-water mark is reached through the HighWaterStore interface that the
// persist package implements. Nothing here does I/O on the hot path; the
// high-water window is reserved ahead by a background step (see DESIGN.md).
package engine
