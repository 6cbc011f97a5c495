package fabric

// EventType is the type of a CM event: the values and names of librdmacm's
// enum rdma_cm_event_type.
type EventType int32

// The event types, numbered as in librdmacm.
const (
	EventAddrResolved     EventType = 0
	EventAddrError        EventType = 1
	EventRouteResolved    EventType = 2
	EventRouteError       EventType = 3
	EventConnectRequest   EventType = 4
	EventConnectResponse  EventType = 5
	EventConnectError     EventType = 6
	EventUnreachable      EventType = 7
	EventRejected         EventType = 8
	EventEstablished      EventType = 9
	EventDisconnected     EventType = 10
	EventDeviceRemoval    EventType = 11
	EventMulticastJoin    EventType = 12
	EventMulticastError   EventType = 13
	EventAddrChange       EventType = 14
	EventTimewaitExit     EventType = 15
	EventAddrInfoResolved EventType = 16
	EventAddrInfoError    EventType = 17
	EventUser             EventType = 18
)

// NumEventTypes is one more than the largest event type a user can see.
const NumEventTypes = 19

var eventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED",
	"RDMA_CM_EVENT_ADDR_ERROR",
	"RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR",
	"RDMA_CM_EVENT_CONNECT_REQUEST",
	"RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR",
	"RDMA_CM_EVENT_UNREACHABLE",
	"RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED",
	"RDMA_CM_EVENT_DISCONNECTED",
	"RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN",
	"RDMA_CM_EVENT_MULTICAST_ERROR",
	"RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
	"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
	"RDMA_CM_EVENT_ADDRINFO_ERROR",
}

// String returns the name rdma_event_str(3) gives: "RDMA_CM_EVENT_<NAME>" for
// types 0 to 17 and "UNKNOWN EVENT" for anything else, USER included.
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "UNKNOWN EVENT"
}
