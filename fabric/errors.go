package fabric

import "errors"

// ErrClosed is wrapped, with EBADF, by a call that was waiting for an event
// when the event source (the channel) it waited on was closed:
// EventSource.Next, channel.GetEvent when the channel is closed meanwhile,
// and a synchronous id's blocking call (ResolveAddr, Connect, GetRequest,
// ...) when the id is destroyed from another goroutine (its private channel
// goes with it). Package id re-declares it as id.ErrClosed.
var ErrClosed = errors.New("event channel closed")
