//go:build tscforce

package engine

// tscForced: built with -tags tscforce (bench/run's measurement of the
// counter check where the kernel's clock is not the counter), TSCTrusted
// reports true without looking.
const tscForced = true
