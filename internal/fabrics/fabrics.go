// Package fabrics registers the fabrics that ship with cmrt: the software
// fabric ("soft", the default) and the kernel's RDMA CM ("kernel"). Package
// id imports it, so that id.Create(nil, ...) and channel.New() find the
// default fabric, and $CMRT_FABRIC can name either, whatever else a
// program imports. Importing a fabric registers it and starts nothing: the
// software fabric starts its loop with its first id, the kernel fabric
// opens /dev/infiniband/rdma_cm with its first channel.
//
// It exists apart from package id only to say so in one place; the fabrics
// themselves import package fabric, never id, so there is no cycle.
package fabrics

import (
	_ "github.com/cmrt/cmrt/fabric/kernel" // registers "kernel"
	_ "github.com/cmrt/cmrt/fabric/soft"   // registers "soft"
)
