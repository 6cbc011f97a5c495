// Package diffkernel is the differential test of the software fabric
// against the kernel's rdma_cm: it runs one CM call sequence
// (internal/callseq) on two sets of ids side by side, one on the software
// fabric and one on the kernel fabric, records each side's journal
// (id.WithJournal) and compares them epoch by epoch: after each operation,
// once both sides are quiet (or a bound passes), each id's calls with
// their errnos, its events with their statuses, and its state.
//
// What may differ for no reason is left out: handles, channel numbers,
// times, and the order of two events the model (journal.EventAllowed,
// journal.CallAllowed) allows both ways. What differs by transport is mapped by
// an equivalence table (Equivalences): the kernel on an IB or RoCE device
// reports IB's reject reasons, CONNECT_RESPONSE for ids without a QP,
// TIMEWAIT_EXIT, and the disconnecting side's DISCONNECTED only with the
// peer's DREP, where the software fabric, like the kernel on iWARP, does
// not. What differs on purpose, or because the kernel fabric cannot do it
// (it has no QPs, which iWARP's CM needs to connect), is a documented
// divergence (Documented): a sequence that runs into one is counted apart
// and compared no further. README's "Where cmrt differs, and why" lists
// them.
//
// A sequence may end with a probe (callseq.Op.Probe): a call the model
// refuses, made on the kernel's endpoint directly, to check journal.CallAllowed
// against the kernel's own state checks.
//
// The test VM (/work/shared/vm) has the devices (Devices): siw0 on dummy1
// and rxe0 on dummy0; test/diffkernel runs there (make diff-kernel). Every
// sequence that once diverged is kept with the kernel's trace (Trace) and
// replayed on the software fabric alone in `make test` (RunTrace), in a
// network namespace laid out as the VM's.
package diffkernel
