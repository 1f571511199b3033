package engine

// CanIssue reports whether an ID of the current time unit may leave now:
// nil, or the error NextIDs would answer (a *LeaseError once the worker
// lease has ended, with why it is not renewed; a *ClockBackError once the
// clock went back past the borrow; ErrClosed). It issues nothing, never
// waits, and does not wake the node's renewal as a refused request does.
func (g *Generator) CanIssue() error {
	wall, wallMS := g.wallMS()
	g.mu.Lock()
	closed, cur, floor := g.closed, g.cur, g.bootFloor
	g.mu.Unlock()
	if closed {
		return ErrClosed
	}
	t := max(cur, wall)
	if lease := g.leaseEnd.Load(); t >= g.leaseTicks(lease) {
		return g.leaseError(lease, t)
	}
	if ref := max(wall, floor); cur > ref && t-ref > g.borrowTicks {
		return g.clockBackError(t*g.unitMS - wallMS)
	}
	return nil
}
