package tool

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// Environment knobs of the software fabric, read by Fabric when the
// software fabric is the one selected:
//
//	CMRT_SOFT_CRC=1          ask for MPA CRC32c
//	CMRT_SOFT_P2P=write|read|write,read|off
//	                         as initiator, offer these RTRs in MPA
//	                         peer-to-peer mode (default write), or ask for
//	                         no P2P mode (off, as siw's initiator)
//	CMRT_SOFT_HOLD=10ms      responder's hold of its first FPDU (-1s: none)
const (
	EnvSoftCRC  = "CMRT_SOFT_CRC"
	EnvSoftP2P  = "CMRT_SOFT_P2P"
	EnvSoftHold = "CMRT_SOFT_HOLD"
)

// Fabric returns the fabric the programs run on: the one $CMRT_FABRIC
// names ("soft", the default, or "kernel"). When it is the software fabric
// and a CMRT_SOFT_* variable is set, it is a software fabric configured by
// them. An unknown name is an error wrapping ENODEV.
func Fabric() (fabric.Fabric, error) {
	f, err := fabric.Default()
	if err != nil {
		return nil, &id.Error{Op: "create_event_channel", Err: err}
	}
	if f.Name() != "soft" {
		return f, nil
	}
	var opts []soft.Option
	if v := os.Getenv(EnvSoftCRC); v != "" && v != "0" {
		opts = append(opts, soft.WithCRC(true))
	}
	if v := os.Getenv(EnvSoftP2P); v != "" {
		var rtr soft.RTR
		for _, t := range strings.Split(v, ",") {
			switch strings.TrimSpace(t) {
			case "write":
				rtr |= soft.RTRWrite
			case "read":
				rtr |= soft.RTRRead
			case "off":
				if v != "off" {
					return nil, fmt.Errorf("%s=%q: want write, read, write,read or off", EnvSoftP2P, v)
				}
			default:
				return nil, fmt.Errorf("%s=%q: want write, read, write,read or off", EnvSoftP2P, v)
			}
		}
		opts = append(opts, soft.WithP2P(rtr))
	}
	if v := os.Getenv(EnvSoftHold); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvSoftHold, err)
		}
		opts = append(opts, soft.WithResponderHold(d))
	}
	if len(opts) == 0 {
		return f, nil
	}
	return soft.New(opts...), nil
}

// CreateEventChannel opens an event channel on the fabric the programs run
// on (Fabric), as the create_event_channel of librdmacm's examples
// (common.c): when that fails it prints, on w, "No RDMA devices were
// detected" if the error is ENODEV (no such fabric, or no device for it)
// and perror's "failed to create RDMA CM event channel: ..." otherwise,
// either followed by cmrt's account in parentheses.
func CreateEventChannel(w io.Writer) (*channel.Channel, error) {
	f, err := Fabric()
	var ch *channel.Channel
	if err == nil {
		ch, err = NewChannel(f)
	}
	if err == nil {
		return ch, nil
	}
	if e, ok := Errno(err); ok && e == syscall.ENODEV {
		fmt.Fprintln(w, "No RDMA devices were detected"+Account(err))
	} else {
		Perror(w, "failed to create RDMA CM event channel", err)
	}
	return nil, err
}

// NewChannel opens an event channel on f, as rdma_create_event_channel.
func NewChannel(f fabric.Fabric) (*channel.Channel, error) {
	return channel.New(channel.WithFabric(f))
}

// HasDataPath reports whether i's fabric creates QPs (the software fabric
// does; the kernel fabric has no verbs layer and answers CreateQP with
// ENOSYS).
func HasDataPath(i *id.ID) bool {
	_, ok := i.Endpoint().(fabric.QPCreator)
	return ok
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return isatty(int(f.Fd()))
}
