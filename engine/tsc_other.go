//go:build !(linux && amd64)

package engine

// rdtsc is not read where there is no time-stamp counter check.
func rdtsc() int64 { return 0 }

// tscTrusted: the time-stamp counter is checked only on Linux on amd64.
func tscTrusted() bool { return false }
