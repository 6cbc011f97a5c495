// Package uverbs speaks the Linux verbs user ABI: the write(2) command
// protocol of /dev/infiniband/uverbsN (kernel drivers/infiniband/core/
// uverbs_main.c and uverbs_cmd.c, header include/uapi/rdma/ib_user_verbs.h,
// ABI version 6), in pure Go.
//
// Every command is a single write(2) of an 8-byte header {u32 command;
// u16 in_words; u16 out_words} followed by the command's fixed payload and,
// for commands that take one, the device driver's request bytes. in_words
// counts the whole write (header included) in 32-bit words, out_words the
// response (the core response followed by the driver's) in 32-bit words.
// Commands with a response start their payload with a u64 user address the
// kernel copies the response to while the write runs; the driver's response
// follows the core one there. Only the legacy (non-extended) commands are
// used: each of them still has its write(2) form on kernel 6.1.
//
// The package holds:
//
//   - one request type per command (GetContext, AllocPD, RegMR, CreateCQ,
//     CreateQP, ModifyQP, PostSend, CreateAH, ...) whose Encode method writes
//     header, payload and driver bytes into a caller-supplied buffer, every
//     reserved byte zero and no allocation (cmd*.go);
//   - decoders (and, for tests and fake kernels, encoders) of every response
//     and of the records the kernel hands out on the context's descriptors:
//     async events and completion events (event.go) and the core work
//     completion struct ib_uverbs_wc (cmd_cq.go);
//   - Context, one open device: its command descriptor with pinned scratch
//     memory for responses, its async event descriptor, and mmap(2) of the
//     queues a driver shares with user space (context.go).
//
// Integers are host-endian. All errors satisfy errors.Is(err, syscall.EXXX)
// for the errno libibverbs would report; the package's sentinel errors can
// be matched with errors.Is as well.
//
// The package is internal to the kernel fabric and knows nothing of a
// particular device: the queue layouts of rxe, siw, ... live in
// fabric/kernel/internal/provider.
package uverbs
