package soft

// SetPortRange makes f pick automatic TCP ports from low..high, starting
// its scan at first(n) of the n ports, so tests can choose which port an
// id gets.
func SetPortRange(f *Fabric, low, high int, first func(n int) int) {
	f.ports.mu.Lock()
	defer f.ports.mu.Unlock()
	f.ports.low, f.ports.high, f.ports.first = low, high, first
}
