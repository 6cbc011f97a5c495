package id

// The fabrics that ship with cmrt are registered by importing id: a
// synchronous id (Create with a nil channel) and channel.New use the
// default fabric, fabric.Default ($CMRT_FABRIC, "soft" when unset),
// whatever else the program imports.
import _ "github.com/cmrt/cmrt/internal/fabrics"
