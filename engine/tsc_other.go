//go:build !(linux && amd64) || notsc

package engine

// rdtsc is not read where there is no time-stamp counter check.
func rdtsc() int64 { return 0 }

// TSCTrusted reports whether a generator with Config.TSC checks its
// readings on the time-stamp counter: only on Linux on amd64.
func TSCTrusted() bool { return false }
