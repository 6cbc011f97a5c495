package id_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/id"
)

func TestEventTypeNumbersAndNames(t *testing.T) {
	want := []struct {
		t    id.EventType
		num  int
		name string
	}{
		{id.EventAddrResolved, 0, "RDMA_CM_EVENT_ADDR_RESOLVED"},
		{id.EventAddrError, 1, "RDMA_CM_EVENT_ADDR_ERROR"},
		{id.EventRouteResolved, 2, "RDMA_CM_EVENT_ROUTE_RESOLVED"},
		{id.EventRouteError, 3, "RDMA_CM_EVENT_ROUTE_ERROR"},
		{id.EventConnectRequest, 4, "RDMA_CM_EVENT_CONNECT_REQUEST"},
		{id.EventConnectResponse, 5, "RDMA_CM_EVENT_CONNECT_RESPONSE"},
		{id.EventConnectError, 6, "RDMA_CM_EVENT_CONNECT_ERROR"},
		{id.EventUnreachable, 7, "RDMA_CM_EVENT_UNREACHABLE"},
		{id.EventRejected, 8, "RDMA_CM_EVENT_REJECTED"},
		{id.EventEstablished, 9, "RDMA_CM_EVENT_ESTABLISHED"},
		{id.EventDisconnected, 10, "RDMA_CM_EVENT_DISCONNECTED"},
		{id.EventDeviceRemoval, 11, "RDMA_CM_EVENT_DEVICE_REMOVAL"},
		{id.EventMulticastJoin, 12, "RDMA_CM_EVENT_MULTICAST_JOIN"},
		{id.EventMulticastError, 13, "RDMA_CM_EVENT_MULTICAST_ERROR"},
		{id.EventAddrChange, 14, "RDMA_CM_EVENT_ADDR_CHANGE"},
		{id.EventTimewaitExit, 15, "RDMA_CM_EVENT_TIMEWAIT_EXIT"},
		{id.EventAddrInfoResolved, 16, "RDMA_CM_EVENT_ADDRINFO_RESOLVED"},
		{id.EventAddrInfoError, 17, "RDMA_CM_EVENT_ADDRINFO_ERROR"},
		// rdma_event_str has no name for USER (or anything past it).
		{id.EventUser, 18, "UNKNOWN EVENT"},
		{19, 19, "UNKNOWN EVENT"},
		{-1, -1, "UNKNOWN EVENT"},
	}
	for _, w := range want {
		if int(w.t) != w.num {
			t.Errorf("%s = %d, want %d", w.name, w.t, w.num)
		}
		if got := w.t.String(); got != w.name {
			t.Errorf("EventType(%d).String() = %q, want %q", w.num, got, w.name)
		}
	}
}

func TestPortSpaces(t *testing.T) {
	for _, c := range []struct {
		ps   id.PortSpace
		val  uint16
		name string
		qp   id.QPType
	}{
		{id.PSIPoIB, 0x0002, "RDMA_PS_IPOIB", id.UD},
		{id.PSTCP, 0x0106, "RDMA_PS_TCP", id.RC},
		{id.PSUDP, 0x0111, "RDMA_PS_UDP", id.UD},
		{id.PSIB, 0x013F, "RDMA_PS_IB", id.RC},
	} {
		if uint16(c.ps) != c.val || c.ps.String() != c.name || !c.ps.Valid() || c.ps.DefaultQPType() != c.qp {
			t.Errorf("%s: value %#x valid %v qp %s", c.name, uint16(c.ps), c.ps.Valid(), c.ps.DefaultQPType())
		}
	}
	if got := id.PSTCP.ServiceID(7471); got != 0x01061D2F {
		t.Errorf("service id = %#x, want 0x01061D2F", got)
	}
	for _, bad := range []id.PortSpace{0, 0x0107, 0xFFFF} {
		if bad.Valid() {
			t.Errorf("%#x valid", uint16(bad))
		}
		if _, err := id.Create(nil, nil, bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Create(ps %#x) = %v, want EINVAL", uint16(bad), err)
		}
	}
	if id.UDPQKey != 0x01234567 {
		t.Errorf("UDP qkey %#x", id.UDPQKey)
	}
}

func TestStatusErrno(t *testing.T) {
	for _, c := range []struct {
		t      id.EventType
		status int
		want   syscall.Errno
	}{
		{id.EventRejected, 28, syscall.ECONNREFUSED},
		{id.EventRejected, -int(syscall.ECONNRESET), syscall.ECONNREFUSED},
		{id.EventUnreachable, -int(syscall.ETIMEDOUT), syscall.ETIMEDOUT},
		{id.EventAddrError, -int(syscall.ENETUNREACH), syscall.ENETUNREACH},
		{id.EventUnreachable, 1, syscall.EPERM},
	} {
		if got := id.StatusErrno(c.t, c.status); got != c.want {
			t.Errorf("StatusErrno(%s, %d) = %v, want %v", c.t, c.status, got, c.want)
		}
	}
}
