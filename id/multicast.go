package id

import (
	"context"
	"net/netip"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/id/journal"
)

// multicast is one join of an id to a group.
type multicast struct {
	uid       uint64
	ref       entry // what the handle table points to: {mc: the join itself}
	id        *ID
	group     netip.Addr
	context   any
	sendOnly  bool
	reported  atomic.Uint64
	completed atomic.Uint64
	waiters   atomic.Int32
}

// JoinFlags select the kind of multicast membership, as
// enum rdma_cm_join_mc_attr_mask's join flags.
type JoinFlags uint8

// Join flags.
const (
	// JoinFullMember sends to and receives from the group.
	JoinFullMember JoinFlags = 0
	// JoinSendOnly sends to the group without receiving its traffic.
	JoinSendOnly JoinFlags = 1
)

// JoinMulticast joins a multicast group as a full member, as
// rdma_join_multicast: MULTICAST_JOIN (with the group's UD parameters and
// context as JoinContext) or MULTICAST_ERROR follows. The id must be a UD id
// bound to a device (EINVAL otherwise).
func (i *ID) JoinMulticast(group netip.Addr, context any) error {
	return i.JoinMulticastContext(contextBackground(), group, JoinFullMember, context)
}

// JoinMulticastContext is JoinMulticast with join flags (rdma_join_multicast_ex)
// and a context bounding the wait of a synchronous id.
func (i *ID) JoinMulticastContext(ctx context.Context, group netip.Addr, flags JoinFlags, context any) error {
	if !group.IsValid() || !group.Unmap().IsMulticast() {
		return errorf("join_multicast", syscall.EINVAL, "%s is not a multicast address", group)
	}
	if flags > JoinSendOnly {
		return errorf("join_multicast", syscall.EINVAL, "join flags %d", flags)
	}
	if i.qpType != UD {
		// As the kernel's rdma_join_multicast since Linux 6.3.
		return errorf("join_multicast", syscall.EINVAL, "multicast needs a UD id, this one is %s", i.qpType)
	}
	group = group.Unmap()
	return i.runAsync(ctx, journal.CallJoin, func() error {
		if _, dup := i.mcs[group]; dup {
			return errorf("join_multicast", syscall.EADDRINUSE, "already joined %s", group)
		}
		mc := &multicast{id: i, group: group, context: context, sendOnly: flags == JoinSendOnly}
		mc.ref.mc = mc
		uid, err := addHandle("join_multicast", &mc.ref)
		if err != nil {
			return err
		}
		mc.uid = uid
		if err := i.ep.Join(mc.uid, group, mc.sendOnly); err != nil {
			removeHandle(mc.uid)
			return err
		}
		if i.mcs == nil {
			i.mcs = make(map[netip.Addr]*multicast)
		}
		i.mcs[group] = mc
		return nil
	})
}

// LeaveMulticast leaves a group, as rdma_leave_multicast: traffic to the
// group stops reaching the id, and the call waits until the join's events
// have been acknowledged (on a synchronous id whose current event is the
// join's, that event is acknowledged first: librdmacm would wait forever),
// unless a handler of one of the id's events is running (see Handler):
// then it returns without waiting. Leaving a group that was never joined
// fails with EADDRNOTAVAIL.
func (i *ID) LeaveMulticast(group netip.Addr) error {
	group = group.Unmap()
	var mc *multicast
	err := i.run(journal.CallLeave, func() error {
		mc = i.mcs[group]
		if mc == nil {
			return errorf("leave_multicast", syscall.EADDRNOTAVAIL, "%s not joined", group)
		}
		delete(i.mcs, group)
		removeHandle(mc.uid) // no more events for the join
		return i.ep.Leave(group)
	})
	if mc == nil {
		return err
	}
	i.mu.Lock()
	var old *Event
	if i.sync && i.event != nil && i.event.mc == mc {
		old = i.takeEvent()
	}
	i.mu.Unlock()
	ackTaken(old)
	goal := mc.reported.Load()
	if i.handlerRunning() {
		return err
	}
	mc.waiters.Add(1)
	i.waitCompleted(func() bool { return mc.completed.Load() >= goal })
	mc.waiters.Add(-1)
	return err
}

func contextBackground() context.Context { return context.Background() }
