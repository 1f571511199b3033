//go:build race

package engine

// raceEnabled: the race detector slows the public-ID permutation tests about tenfold.
const raceEnabled = true
