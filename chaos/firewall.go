package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// firewall cuts traffic between nodes with iptables rules in a chain of its
// own, jumped to from OUTPUT. Each node runs as its own Unix user and binds
// its own loopback address (127.0.0.2, .3, ...), so "a cannot send to b" is
// one rule: packets owned by a's user to b's address are dropped. 127.0.0.1
// is no node's address on purpose: it is the source of every connection a
// process opens on loopback, so replies to those are never matched, and
// clients (the campaign's own user) are never cut.
type firewall struct {
	chain string
	mu    sync.Mutex
}

// newFirewall makes the chain, or says why partitions are not possible here.
func newFirewall() (*firewall, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("partitions need root (iptables rules and one Unix user per node)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, errors.New("partitions need iptables (apt-get install -y iptables)")
	}
	removeStaleChains()
	f := &firewall{chain: fmt.Sprintf("IDSCHAOS%d", os.Getpid())}
	if err := iptables("-N", f.chain); err != nil {
		return nil, err
	}
	if err := iptables("-I", "OUTPUT", "-j", f.chain); err != nil {
		iptables("-X", f.chain)
		return nil, err
	}
	return f, nil
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cut drops what the process of user uid sends to host.
func (f *firewall) cut(uid int, host string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return iptables("-A", f.chain, "-m", "owner", "--uid-owner", strconv.Itoa(uid), "-d", host, "-j", "DROP")
}

// heal removes every rule.
func (f *firewall) heal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return iptables("-F", f.chain)
}

// close removes the chain and the jump to it.
func (f *firewall) close() error {
	err := errors.Join(iptables("-F", f.chain), iptables("-D", "OUTPUT", "-j", f.chain))
	return errors.Join(err, iptables("-X", f.chain))
}

// removeStaleChains removes the chains of campaigns whose process is gone
// (killed before it could clean up), and only those.
func removeStaleChains() {
	out, err := exec.Command("iptables", "-w", "5", "-S").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		chain, ok := strings.CutPrefix(line, "-N IDSCHAOS")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(chain)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + chain); err == nil {
			continue // still running
		}
		name := "IDSCHAOS" + chain
		iptables("-F", name)
		for iptables("-D", "OUTPUT", "-j", name) == nil {
		}
		iptables("-X", name)
	}
}
