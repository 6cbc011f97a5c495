package soft

// SetPortRange makes f pick automatic TCP ports from low..high, starting
// its scan at first(n) of the n ports, so tests can choose which port an
// id gets.
func SetPortRange(f *Fabric, low, high int, first func(n int) int) {
	f.ports.mu.Lock()
	defer f.ports.mu.Unlock()
	f.ports.low, f.ports.high, f.ports.first = low, high, first
}

// SetHalfOpenLimits bounds the pools of connections without an MPA Request
// of f's listeners made after the call: perSource per source host, all in
// all.
func SetHalfOpenLimits(f *Fabric, perSource, all int) {
	f.halfOpenBounds = [2]int{perSource, all}
}
