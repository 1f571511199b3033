//go:build linux && amd64 && !notsc

package engine

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"unsafe"
)

// rdtsc reads the CPU's time-stamp counter (tsc_linux_amd64.s).
func rdtsc() int64

// TSCTrusted reports whether the kernel's own clock is the time-stamp
// counter (where a generator with Config.TSC checks its readings on it), so that the counter is as good a measure of elapsed time as
// the monotonic clock (which the vDSO computes from it): the clocksource
// is "tsc", the CPU says its counter runs at a constant rate and through
// sleep states (constant_tsc, nonstop_tsc), and RDTSC is not disabled for
// this process (PR_GET_TSC).
func TSCTrusted() bool {
	if tscForced {
		return true
	}
	src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil || strings.TrimSpace(string(src)) != "tsc" {
		return false
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	steady := false
	for line := range strings.SplitSeq(string(info), "\n") {
		if name, flags, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			f := strings.Fields(flags)
			steady = slices.Contains(f, "constant_tsc") && slices.Contains(f, "nonstop_tsc")
			break
		}
	}
	if !steady {
		return false
	}
	const prGetTSC, prTSCEnable = 25, 1
	var mode int32
	if _, _, e := syscall.Syscall(syscall.SYS_PRCTL, prGetTSC, uintptr(unsafe.Pointer(&mode)), 0); e != 0 || mode != prTSCEnable {
		return false
	}
	return true
}
