//go:build !race

package netlink

const raceEnabled = false
