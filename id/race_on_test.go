//go:build race

package id

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true
