//go:build !race

package soft

const RaceEnabled = false
