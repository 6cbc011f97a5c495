// Package ucma speaks the Linux RDMA communication manager's user ABI: the
// write-only command protocol of /dev/infiniband/rdma_cm (kernel
// drivers/infiniband/core/ucma.c, header include/uapi/rdma/rdma_user_cm.h,
// ABI version 4).
//
// Every command is a single write(2) of an 8-byte header {u32 cmd; u16 in;
// u16 out} followed by a fixed-size payload; in is the payload size and out
// the size of the response, which the kernel copies to the user address held
// in the payload's u64 response field. There is no read(2) and no ioctl.
//
// The package is a pure-Go, allocation-free codec plus a minimal syscall
// layer:
//
//   - one request type per command (CreateID, Bind, Connect, ...), each with
//     an Encode method that writes header and payload into a caller-supplied
//     buffer, all reserved bytes zero (cmd*.go);
//   - socket addresses (sockaddr_in, sockaddr_in6, sockaddr_ib) to and from
//     net/netip and IBAddr (sockaddr.go);
//   - decoders, and for testing or fake kernels encoders, for every response:
//     event_resp (event.go), conn_param, ud_param and ah_attr (conn.go),
//     path records (path.go), QUERY and QUERY_ROUTE responses (query.go) and
//     ib_uverbs_qp_attr (qpattr.go);
//   - Open, ABIVersion, Write and Buffers, the pinned command and response
//     scratch memory whose address goes into the response field (ops.go).
//
// Integers are host-endian unless the ABI makes them big-endian: ports,
// the pkey, flowinfo, sid and sid_mask of sockaddr_ib, the be16/be32 fields
// of ib_user_path_rec, the whole packed IBTA path record, and the node GUID
// and pkey of QUERY responses. Decoded structs always hold plain host
// values.
//
// All errors satisfy errors.Is(err, syscall.EXXX) for the errno librdmacm
// would report, and the package's sentinel errors can be matched with
// errors.Is as well.
//
// The package is internal to the kernel fabric: it knows nothing of ids,
// channels or event dispatch, which live above it.
package ucma
