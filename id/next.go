package id

import (
	"context"
)

// NextEvent retrieves the next event from src and maps it to its id, as
// rdma_get_cm_event: the uid the fabric reports names the id (or multicast
// join); a CONNECT_REQUEST creates the new id, which inherits the listener's
// channel, context, port space and QP type (a synchronous listener's new id
// gets a private channel of its own); the id's state advances and the event
// is journaled. Events for ids destroyed meanwhile are dropped, as the kernel
// drops them. With block unset an empty source gives an error wrapping
// EAGAIN.
func NextEvent(ctx context.Context, src EventSource, block bool) (*Event, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	for {
		ev := newEvent()
		if err := src.Next(ctx, block, &ev.raw); err != nil {
			ev.free()
			return nil, err
		}
		ev.src = src
		if deliver(ev) {
			return ev, nil
		}
		ev.free()
	}
}

// dropChild rejects and destroys the new endpoint of a request nobody will
// see.
func dropChild(raw *RawEvent) {
	if raw.Child != nil {
		_ = raw.Child.Reject(nil)
		_ = raw.Child.Destroy()
		raw.Child = nil
	}
}

// deliver maps a raw event to its id and reports whether the user gets it.
func deliver(ev *Event) bool {
	raw := &ev.raw
	handles.Lock()
	e, ok := handles.m[raw.UID]
	if !ok || (raw.Type == EventConnectRequest && (raw.Child == nil || e.id == nil)) {
		handles.Unlock()
		dropChild(raw)
		return false
	}
	var child, listener *ID
	switch {
	case e.mc != nil:
		ev.mc = e.mc
		ev.owner = e.mc.id
		e.mc.reported.Add(1)
	case raw.Type == EventConnectRequest:
		listener = e.id
		child = &ID{
			fabric: listener.fabric, ps: listener.ps, qpType: listener.qpType,
			journal: listener.journal, ep: raw.Child, state: StateConnectRequest,
			parent: listener.uid,
		}
		child.cond.L = &child.mu
		handles.next++
		child.uid = handles.next
		handles.m[child.uid] = entry{id: child}
		ev.owner = listener
	default:
		ev.owner = e.id
	}
	ev.owner.reported.Add(1)
	handles.Unlock()

	ev.Type = raw.Type
	ev.Status = int(raw.Status)
	ev.Arg = raw.Arg
	if child != nil {
		raw.Child = nil
		listener.mu.Lock()
		child.userCtx, child.ch, child.src, child.sync = listener.userCtx, listener.ch, listener.src, false
		lsync := listener.sync
		listener.mu.Unlock()
		if lsync && !child.makeSync() {
			ev.complete() // dropped internally: keep the listener's counts balanced
			return false
		}
		ev.ID, ev.ListenID = child, listener
	} else {
		ev.ID = ev.owner
	}
	id := ev.ID
	switch {
	case ev.mc != nil:
		ev.UD.QPNum, ev.UD.QKey, ev.UD.AH = raw.QPNum, raw.QKey, raw.AH
		ev.JoinContext, ev.Group = ev.mc.context, raw.Group
	case id.qpType == UD:
		ev.UD.QPNum, ev.UD.QKey, ev.UD.AH = raw.QPNum, raw.QKey, raw.AH
		ev.UD.PrivateData = ownPrivateData(raw)
	default:
		c := &ev.Conn
		c.ResponderResources, c.InitiatorDepth = raw.ResponderResources, raw.InitiatorDepth
		c.FlowControl, c.RetryCount, c.RNRRetryCount, c.SRQ = raw.FlowControl, raw.RetryCount, raw.RNRRetryCount, raw.SRQ
		c.QPNum = raw.QPNum
		c.PrivateData = ownPrivateData(raw)
	}

	id.mu.Lock()
	if child != nil {
		// Remember what the peer asked for: Accept(nil) answers with it.
		id.reqIRD, id.reqORD = raw.ResponderResources, raw.InitiatorDepth
	} else {
		id.state = AfterEvent(id.state, raw.Type)
	}
	rec := Record{ID: id.uid, Parent: id.parent, Kind: KindEvent, QPType: id.qpType, Event: raw.Type, Status: raw.Status, State: id.state}
	if child == nil {
		rec.Parent = 0
	}
	ev.Seq = id.journal.add(rec)
	id.mu.Unlock()
	return true
}

// makeSync gives a new id born from a synchronous listener's request a
// private channel, as librdmacm does. On failure the new id is rejected and
// destroyed, and the request dropped.
func (i *ID) makeSync() bool {
	src, err := i.fabric.Open()
	if err == nil {
		if err = src.Migrate(i.ep); err != nil {
			_ = src.Close()
		}
	}
	if err != nil {
		_ = i.ep.Reject(nil)
		_ = i.Destroy()
		return false
	}
	i.mu.Lock()
	i.src, i.sync = src, true
	i.mu.Unlock()
	return true
}

// ownPrivateData copies an event's private data into memory of its own.
// Events are recycled, so a slice of the event's buffer would let a program
// that keeps (or writes through) it after Ack see or corrupt another id's
// private data; the copy costs one allocation, on set-up events only.
func ownPrivateData(raw *RawEvent) []byte {
	if raw.PrivateDataLen == 0 {
		return nil
	}
	return append([]byte(nil), raw.PrivateData[:raw.PrivateDataLen]...)
}
