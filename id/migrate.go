package id

import (
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id/journal"
)

// Migrate moves the id to another event channel, as rdma_migrate_id: events
// still queued for it move too, and Migrate waits until the events already
// reported through the old channel have been acknowledged, unless a handler
// of one of the id's events is running (see Handler): then it returns
// without waiting for them. A nil channel makes the id
// synchronous with a new private channel; migrating a synchronous id to nil
// is EINVAL, as is a channel of another fabric.
func (i *ID) Migrate(ch Channel) error {
	i.mu.Lock()
	_, err := i.checkCall(journal.CallMigrate)
	if err == nil && ch == nil && i.sync {
		err = errorf("migrate_id", syscall.EINVAL, "id %d is already synchronous", i.uid)
	}
	var dst fabric.EventSource
	if err == nil {
		if ch == nil {
			dst, err = i.fabric.Open()
		} else if dst = ch.Source(); dst == nil || dst.Fabric() != i.fabric {
			err = errorf("migrate_id", syscall.EINVAL, "channel is closed or on another fabric")
		}
	}
	// The events reported through the old channel, counted before the move:
	// once moved, a reader of the new channel may be handed the id's next
	// event at once (the kernel fabric wakes one already waiting), and
	// waiting for that one too would wait for an Ack that the caller of
	// Migrate may only give after it returns (as rdma_migrate_id waits for
	// the events_reported the kernel counted on the old file).
	goal := i.reported.Load()
	if err == nil {
		if err = dst.Migrate(i.ep); err != nil && ch == nil {
			_ = dst.Close()
		}
	}
	if err != nil {
		i.record(journal.CallMigrate, err)
		i.mu.Unlock()
		return wrap("migrate_id", err)
	}
	oldSrc, wasSync := i.src, i.sync
	old := i.takeEvent()
	i.src, i.ch, i.sync = dst, ch, ch == nil
	i.chNum = sourceNumber(dst)
	i.record(journal.CallMigrate, nil)
	i.mu.Unlock()

	ackTaken(old)
	if wasSync {
		_ = oldSrc.Close()
	}
	i.waitAcked(goal)
	return nil
}
