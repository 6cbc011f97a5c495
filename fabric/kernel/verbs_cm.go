package kernel

import (
	"errors"
	"net/netip"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/ucma"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// What the CM's events and calls do to an id's QP (see verbs_qp.go).

// fail moves the QP to the error state.
func (q *vqp) fail() { q.toErr(uverbs.QPStateErr) }

// shutdown is rdma_disconnect's first step: ERR on IB and RoCE, SQD on
// iWARP (whose CM then closes the connection gracefully).
func (q *vqp) shutdown() {
	if q.vd.iwarp {
		q.toErr(uverbs.QPStateSQD)
		return
	}
	q.fail()
}

// postEvent is what Next must do after dequeuing an event, once the
// source's lock is released.
type postEvent struct {
	ep   *endpoint // the id the event is for (not a new connection's)
	join *mcJoin   // the join of a multicast event
}

// errNoQP: the id has no QP, the event goes to the user as it came.
var errNoQP = errors.New("no QP")

// apply runs the QP side of an event: it may rewrite the event (an RC
// CONNECT_RESPONSE becomes ESTABLISHED once the QP is in RTS and the RTU
// sent, or CONNECT_ERROR; a MULTICAST_JOIN whose attach failed becomes
// MULTICAST_ERROR) and reports whether the event is to be dropped (a
// REJECTED or DISCONNECTED after such a CONNECT_ERROR, as librdmacm drops
// them).
func (p *postEvent) apply(raw *fabric.RawEvent) (drop bool) {
	if p.join != nil {
		if raw.Type == fabric.EventMulticastJoin && !p.join.sendOnly && p.join.ep != nil {
			if err := p.join.ep.attach(p.join, raw); err != nil {
				raw.Type, raw.Status = fabric.EventMulticastError, -errnoOf(err)
			}
		}
		return false
	}
	ep := p.ep
	if ep == nil {
		return false
	}
	ep.mu.Lock()
	q, connErr := ep.vqp, ep.connErr
	ep.mu.Unlock()
	switch raw.Type {
	case fabric.EventConnectResponse:
		if q != nil && !q.ud {
			ep.establish(raw)
		}
	case fabric.EventEstablished:
		if q != nil {
			q.toRTS()
		}
	case fabric.EventRejected, fabric.EventDisconnected:
		if connErr {
			return true
		}
		if q != nil {
			q.fail()
		}
	case fabric.EventUnreachable, fabric.EventConnectError:
		if q != nil {
			q.fail()
		}
	}
	return false
}

// establish completes an active RC connection whose id has a QP, as
// librdmacm does on CONNECT_RESPONSE: the QP to RTR and RTS with the CM's
// attributes, then ACCEPT without parameters (the kernel sends the RTU),
// and the event becomes ESTABLISHED. If a step fails the QP goes to the
// error state and the event becomes CONNECT_ERROR with the step's -errno
// (librdmacm reports -1; cmrt keeps the cause).
func (ep *endpoint) establish(raw *fabric.RawEvent) {
	var q *vqp
	err := ep.do("establish", func(_ *source, fd int, b *ucma.Buffers) error {
		q = ep.vqp
		if q == nil {
			return errNoQP
		}
		if err := q.connect(fd, b, 0xFF, 0xFF); err != nil {
			return err
		}
		_, err := b.Exec(fd, &ucma.Accept{ID: ep.handle})
		return err
	})
	switch {
	case errors.Is(err, errNoQP):
	case err != nil:
		if q != nil {
			q.fail()
		}
		ep.mu.Lock()
		ep.connErr = true
		ep.mu.Unlock()
		raw.Type, raw.Status = fabric.EventConnectError, -errnoOf(err)
	default:
		q.toRTS()
		raw.Type = fabric.EventEstablished
	}
}

// errnoOf returns the errno err wraps, EIO if none.
func errnoOf(err error) int32 {
	var e syscall.Errno
	if errors.As(err, &e) {
		return int32(e)
	}
	return int32(syscall.EIO)
}

// attach attaches the id's UD QP to a joined group, with the group's GID
// and LID from the MULTICAST_JOIN event.
func (ep *endpoint) attach(j *mcJoin, raw *fabric.RawEvent) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	q := ep.vqp
	if q == nil || !q.ud || ep.destroyed {
		return nil
	}
	if _, dup := ep.attached[j.group]; dup {
		return nil
	}
	a := mcAttach{gid: raw.AH.DGID, mlid: raw.AH.DLID}
	if err := q.attachMcast(a.gid, a.mlid); err != nil {
		return err
	}
	if ep.attached == nil {
		ep.attached = make(map[netip.Addr]mcAttach)
	}
	ep.attached[j.group] = a
	return nil
}

// detachLocked detaches the id's QP from a group it left. ep.mu is held.
func (ep *endpoint) detachLocked(group netip.Addr) {
	a, ok := ep.attached[group]
	if !ok {
		return
	}
	delete(ep.attached, group)
	if q := ep.vqp; q != nil {
		_ = q.detachMcast(a.gid, a.mlid)
	}
}
