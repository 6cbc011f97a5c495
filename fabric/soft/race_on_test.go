//go:build race

package soft

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts that rely on pools are not meaningful.
const raceEnabled = true
