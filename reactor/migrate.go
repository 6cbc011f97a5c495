package reactor

import "github.com/cmrt/cmrt/fabric"

// watchMigrate installs reg's poke on its source, if the source's
// descriptor does not report the events Migrate moves to it (the kernel
// fabric's, fabric.MigrateNotifier): without it, an event queued for an
// id before the id was migrated to a registered channel would wait for the
// channel's next event, which may never come. The hook goes with reg.stop
// (Unregister, Close) or with the source. Called under regMu, from
// Register.
func (r *Reactor) watchMigrate(reg *registration) {
	mn, ok := reg.src.(fabric.MigrateNotifier)
	if !ok {
		return
	}
	stopMigrate := mn.OnMigrate(func() { r.poke(reg) })
	stopClose := reg.stop
	reg.stop = func() bool {
		stopMigrate()
		return stopClose == nil || stopClose()
	}
}

// poke reads reg on the loop, as a readiness report would: its source took
// events without making its descriptor readable. A full batch is followed
// by another poke, queued behind the loop's other tasks, until a read
// comes short (the source is empty, or reading paused). A poke of a
// registration that is gone (Unregister, a closed channel, Close) does
// nothing, and so does one while reading is paused: resume re-arms every
// descriptor, and epoll_ctl's MOD polls the file again, which reports a
// non-empty rdma_cm queue. Nothing of this runs per event, only per
// Migrate.
func (r *Reactor) poke(reg *registration) {
	if reg.removed.Load() {
		return
	}
	r.post(func() {
		if reg.removed.Load() || r.paused {
			return
		}
		if r.drain(reg) >= r.opts.Batch {
			r.poke(reg)
		}
	})
}
