//go:build !linux

package engine

import "time"

// kernelSleep is time.Sleep where package syscall has no nanosleep: it
// may oversleep by up to a millisecond, which wait's spin cannot
// make up.
func kernelSleep(d time.Duration) { time.Sleep(d) }
