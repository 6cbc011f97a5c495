package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// Environment knobs of the software fabric (the default one, unless
// $CMRT_FABRIC names another):
//
//	CMRT_SOFT_CRC=1          ask for MPA CRC32c
//	CMRT_SOFT_P2P=write|read|write,read
//	                         ask for MPA peer-to-peer mode with these RTRs
//	CMRT_SOFT_HOLD=10ms      responder's hold of its first FPDU (-1s: none)
const (
	envCRC  = "CMRT_SOFT_CRC"
	envP2P  = "CMRT_SOFT_P2P"
	envHold = "CMRT_SOFT_HOLD"
)

// fabricFromEnv returns the fabric to use: nil for the default one, or a
// software fabric configured by the CMRT_SOFT_* variables.
func fabricFromEnv() (id.Fabric, error) {
	if name := os.Getenv(id.FabricEnv); name != "" && name != "soft" {
		return nil, nil
	}
	var opts []soft.Option
	if v := os.Getenv(envCRC); v != "" && v != "0" {
		opts = append(opts, soft.WithCRC(true))
	}
	if v := os.Getenv(envP2P); v != "" {
		var rtr soft.RTR
		for _, t := range strings.Split(v, ",") {
			switch strings.TrimSpace(t) {
			case "write":
				rtr |= soft.RTRWrite
			case "read":
				rtr |= soft.RTRRead
			default:
				return nil, fmt.Errorf("%s=%q: want write, read or write,read", envP2P, v)
			}
		}
		opts = append(opts, soft.WithP2P(rtr))
	}
	if v := os.Getenv(envHold); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", envHold, err)
		}
		opts = append(opts, soft.WithResponderHold(d))
	}
	if len(opts) == 0 {
		return nil, nil
	}
	return soft.New(opts...), nil
}

// newChannel opens an event channel on f (nil: the default fabric).
func newChannel(f id.Fabric) (*channel.Channel, error) {
	if f == nil {
		return channel.New()
	}
	return channel.New(channel.WithFabric(f))
}
