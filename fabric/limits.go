package fabric

// Private-data limits for IP-addressed ids, per operation, as rdma_connect(3)
// and rdma_accept(3) give them (the wire message minus the 36-byte CM header
// the kernel prepends to requests).
const (
	MaxPrivateDataREQ     = 56  // rdma_connect on RC ids
	MaxPrivateDataREP     = 196 // rdma_accept on RC ids
	MaxPrivateDataREJ     = 148 // rdma_reject on RC ids
	MaxPrivateDataSIDRREQ = 180 // rdma_connect on UD ids
	MaxPrivateDataSIDRREP = 136 // rdma_accept and rdma_reject on UD ids
)

// MaxEventPrivateData is the size of the private data buffer of an event.
const MaxEventPrivateData = 256
