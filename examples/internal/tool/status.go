package tool

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/id"
)

// sidrStatus names the SIDR reply statuses (IBA's SIDR_REP status) that a
// UD connect's UNREACHABLE carries.
var sidrStatus = map[int]string{
	1: "IB_SIDR_UNSUPPORTED",
	2: "IB_SIDR_REJECT",
	3: "IB_SIDR_NO_QP",
	4: "IB_SIDR_REDIRECT",
	5: "IB_SIDR_UNSUPPORTED_VERSION",
}

// rejReason names the InfiniBand CM reject reasons (IBA's REJ reason) that
// REJECTED carries on the kernel fabric over IB or RoCE.
var rejReason = map[int]string{
	1: "IB_CM_REJ_NO_QP", 2: "IB_CM_REJ_NO_EEC", 3: "IB_CM_REJ_NO_RESOURCES",
	4: "IB_CM_REJ_TIMEOUT", 5: "IB_CM_REJ_UNSUPPORTED", 6: "IB_CM_REJ_INVALID_COMM_ID",
	7: "IB_CM_REJ_INVALID_COMM_INSTANCE", 8: "IB_CM_REJ_INVALID_SERVICE_ID",
	9: "IB_CM_REJ_INVALID_TRANSPORT_TYPE", 10: "IB_CM_REJ_STALE_CONN",
	11: "IB_CM_REJ_RDC_NOT_EXIST", 12: "IB_CM_REJ_INVALID_GID", 13: "IB_CM_REJ_INVALID_LID",
	14: "IB_CM_REJ_INVALID_SL", 15: "IB_CM_REJ_INVALID_TRAFFIC_CLASS",
	16: "IB_CM_REJ_INVALID_HOP_LIMIT", 17: "IB_CM_REJ_INVALID_PACKET_RATE",
	18: "IB_CM_REJ_INVALID_ALT_GID", 19: "IB_CM_REJ_INVALID_ALT_LID",
	20: "IB_CM_REJ_INVALID_ALT_SL", 21: "IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS",
	22: "IB_CM_REJ_INVALID_ALT_HOP_LIMIT", 23: "IB_CM_REJ_INVALID_ALT_PACKET_RATE",
	24: "IB_CM_REJ_PORT_CM_REDIRECT", 25: "IB_CM_REJ_PORT_REDIRECT",
	26: "IB_CM_REJ_INVALID_MTU", 27: "IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES",
	28: "IB_CM_REJ_CONSUMER_DEFINED", 29: "IB_CM_REJ_INVALID_RNR_RETRY",
	30: "IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID", 31: "IB_CM_REJ_INVALID_CLASS_VERSION",
	32: "IB_CM_REJ_INVALID_FLOW_LABEL", 33: "IB_CM_REJ_INVALID_ALT_FLOW_LABEL",
	35: "IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED",
}

// StatusName names the status of an event of type t: a negative status is
// -errno ("ECONNRESET" for -104); a positive one is a SIDR status on
// UNREACHABLE ("IB_SIDR_REJECT" for 2) or an InfiniBand reject reason on
// REJECTED ("IB_CM_REJ_CONSUMER_DEFINED" for 28). A status it cannot name
// gives "" (0 too).
func StatusName(t id.EventType, status int) string {
	switch {
	case status < 0 && status > -4096:
		return unix.ErrnoName(syscall.Errno(-status))
	case status > 0 && t == id.EventUnreachable:
		return sidrStatus[status]
	case status > 0 && t == id.EventRejected:
		return rejReason[status]
	}
	return ""
}

// StatusText is the status followed by its name, when it has one: "-104
// ECONNRESET", "2 IB_SIDR_REJECT", "7".
func StatusText(t id.EventType, status int) string {
	s := strconv.Itoa(status)
	if n := StatusName(t, status); n != "" {
		s += " " + n
	}
	return s
}
