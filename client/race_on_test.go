//go:build race

package idclient

// raceEnabled: the race detector slows each client process about tenfold.
const raceEnabled = true
