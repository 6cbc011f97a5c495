//go:build race

package soft

// RaceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts that rely on pools are not meaningful.
const RaceEnabled = true
