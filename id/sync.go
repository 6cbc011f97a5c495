package id

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/cmrt/cmrt/id/journal"
)

// complete waits for the outcome of call c on a synchronous id, as
// librdmacm's ucma_complete: the next event on the id's private channel
// becomes the id's current event, and a non-zero status becomes the error
// (statusError: REJECTED gives ECONNREFUSED, other statuses their errno,
// so a rejected UD connect, UNREACHABLE status 2, gives errno 2, ENOENT).
// If ctx ends first the id is abandoned: it moves to StateCanceled and only
// Destroy remains, so a late event cannot be mistaken for the answer to
// another call. If the id is destroyed meanwhile (from another goroutine)
// the call fails with ErrClosed and EBADF.
func (i *ID) complete(ctx context.Context, c journal.Call) error {
	ev, err := NextEvent(ctx, i.src, true)
	if err != nil {
		if ctx.Err() != nil {
			i.cancel()
			return &Error{Op: c.String(), Err: fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())}
		}
		return i.waitError(c.String(), err)
	}
	if !i.keepSync(ev) {
		return i.destroyedError(c.String())
	}
	return statusError(c.String(), ev)
}

// testHookSyncTaken, when set, runs after a synchronous call took its event
// and before the id keeps it (tests: a Destroy in that window).
var testHookSyncTaken func()

// keepSync makes ev, just taken from the private channel of synchronous id
// i, the id's current event, as the answer to its call. It reports false
// when the id was destroyed since the event was delivered: Destroy has
// already released the id's current event and counts this one among those
// it waits for, so ev is acknowledged here instead of kept, or that
// Destroy would wait forever.
func (i *ID) keepSync(ev *Event) bool {
	if testHookSyncTaken != nil {
		testHookSyncTaken()
	}
	ev.syncOwned = true
	i.mu.Lock()
	if i.state == StateDestroyed {
		i.mu.Unlock()
		ev.settle()
		return false
	}
	i.event = ev
	i.mu.Unlock()
	return true
}

// statusError is the error a synchronous call returns for its event: nil
// for status 0, else the errno StatusErrno gives, with the event and its
// status named (see Event.Err).
func statusError(op string, ev *Event) error {
	if ev.Status == 0 {
		return nil
	}
	return &Error{Op: op, Msg: ev.Type.String() + ", " + statusText(ev.Type, ev.Status), Err: StatusErrno(ev.Type, ev.Status)}
}

// waitError is the error of a synchronous call whose wait for an event
// failed: when the id was destroyed meanwhile (its private channel closed
// under the call), ErrClosed with EBADF and words that say so, instead of
// the fabric's name for its closed queue.
func (i *ID) waitError(op string, err error) error {
	if i.destroyed.Load() && errors.Is(err, syscall.EBADF) {
		return i.destroyedError(op)
	}
	return wrap(op, err)
}

// destroyedError is the error of a synchronous call whose id was destroyed
// while it waited: ErrClosed with EBADF.
func (i *ID) destroyedError(op string) error {
	return &Error{Op: op, Msg: fmt.Sprintf("id %d destroyed while the call waited", i.uid),
		Err: fmt.Errorf("%w: %w", ErrClosed, syscall.EBADF)}
}

// cancel moves an id whose blocking call was abandoned to StateCanceled.
func (i *ID) cancel() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.state == StateDestroyed {
		return
	}
	i.state = StateCanceled
	r := journal.Record{ID: i.uid, Parent: i.parent, Channel: i.chNum, Kind: journal.KindCancel, QPType: i.qpType, State: i.state}
	i.journal.Add(r)
}

// GetRequest waits for a connection request on a synchronous listener and
// returns the new id, as rdma_get_request; the request is the new id's
// current event. The new id is synchronous too. On an asynchronous id it
// fails with EINVAL. A REJECTED event gives ECONNREFUSED, another event with
// a bad status its errno, and any other event EINVAL; such events stay
// readable through the listener's Event.
func (i *ID) GetRequest() (*ID, error) { return i.GetRequestContext(context.Background()) }

// GetRequestContext is GetRequest with a context bounding the wait.
func (i *ID) GetRequestContext(ctx context.Context) (*ID, error) {
	i.mu.Lock()
	_, err := i.checkCall(journal.CallGetRequest)
	if err == nil && !i.sync {
		err = errorf("get_request", syscall.EINVAL, "id %d is asynchronous", i.uid)
	}
	i.record(journal.CallGetRequest, err)
	var old *Event
	if err == nil {
		old = i.takeEvent()
	}
	i.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ackTaken(old)
	ev, err := NextEvent(ctx, i.src, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &Error{Op: "get_request", Err: fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())}
		}
		return nil, i.waitError("get_request", err)
	}
	ev.syncOwned = true
	if ev.Type == EventConnectRequest && ev.Status == 0 {
		child := ev.ID
		child.mu.Lock()
		child.event = ev
		child.mu.Unlock()
		i.mu.Lock()
		attr := i.reqQP
		i.mu.Unlock()
		if attr != nil {
			// rdma_get_request gives the id the QP rdma_create_ep was
			// asked for; if it cannot, the request is refused.
			if err := child.CreateQP(attr); err != nil {
				_ = child.Reject(nil)
				_ = child.Destroy()
				return nil, wrap("get_request", err)
			}
		}
		return child, nil
	}
	if !i.keepSync(ev) {
		return nil, i.destroyedError("get_request")
	}
	switch {
	case ev.Type == EventRejected:
		return nil, errorf("get_request", syscall.ECONNREFUSED, "%s", ev.Type)
	case ev.Status != 0:
		return nil, statusError("get_request", ev)
	}
	return nil, errorf("get_request", syscall.EINVAL, "unexpected %s", ev.Type)
}
