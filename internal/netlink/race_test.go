//go:build race

package netlink

const raceEnabled = true
