package callseq

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// AddrKind names an address abstractly; a driver maps it to one of its
// own.
type AddrKind uint8

// Address kinds.
const (
	// Local is the address of the device under test.
	Local AddrKind = iota
	// Wildcard is the IPv4 any address (bind only).
	Wildcard
	// NonLocal is an address of the device's subnet that no interface
	// has (bind: EADDRNOTAVAIL).
	NonLocal
	// Unreachable is a host of the device's subnet that never answers
	// (resolve: it resolves on a link without ARP, then nothing answers).
	Unreachable
	// Unroutable is an address no route leads to.
	Unroutable
	numAddrKinds
)

var addrNames = [...]string{"local", "wildcard", "nonlocal", "unreachable", "unroutable"}

// String returns the kind's name in the text form.
func (k AddrKind) String() string {
	if k < numAddrKinds {
		return addrNames[k]
	}
	return fmt.Sprintf("addr%d", uint8(k))
}

// OptKind is one rdma_set_option a SetOption operation makes.
type OptKind uint8

// Options.
const (
	OptTOS        OptKind = iota // RDMA_OPTION_ID_TOS, a byte
	OptReuseOn                   // RDMA_OPTION_ID_REUSEADDR 1
	OptReuseOff                  // RDMA_OPTION_ID_REUSEADDR 0
	OptAFOnly                    // RDMA_OPTION_ID_AFONLY 1
	OptAckTimeout                // RDMA_OPTION_ID_ACK_TIMEOUT 14
	OptIBPath                    // RDMA_OPTION_IB_PATH, one zeroed path record
	OptBadLength                 // TOS with 4 bytes: EINVAL
	OptUnknown                   // an unknown option: ENOSYS
	numOpts
)

var optNames = [...]string{"tos", "reuse", "noreuse", "afonly", "ack_timeout", "ib_path", "badlen", "unknown"}

// String returns the option's name in the text form.
func (o OptKind) String() string {
	if o < numOpts {
		return optNames[o]
	}
	return fmt.Sprintf("opt%d", uint8(o))
}

// ChanSync is the channel index of a synchronous id (created without a
// channel, or migrated to none).
const ChanSync = 2

// NumPorts is how many port indexes a sequence uses: 0 (any) and 1 to 3.
const NumPorts = 4

// NumGroups is how many multicast groups a sequence uses.
const NumGroups = 2

// Op is one operation of a sequence: a call on the id in Slot. Only the
// fields of its call are meaningful.
type Op struct {
	// Call is the CM call made.
	Call journal.Call
	// Slot numbers the id: ids take slots in the order they are created or
	// born from a connection request (CONNECT_REQUEST, or get_request on
	// a synchronous listener). For CallCreate it is the new id's slot.
	Slot int
	// PS is the port space (create).
	PS id.PortSpace
	// Chan is the channel, 0 or 1, or ChanSync (create, migrate).
	Chan int
	// Peer makes the id on the peer fabric, not the one under test
	// (create; see internal/diffkernel).
	Peer bool
	// Addr and Port name the address (bind; resolve_addr's destination).
	Addr AddrKind
	Port int
	// Src passes the local address as resolve_addr's source.
	Src bool
	// Backlog is listen's backlog.
	Backlog int
	// PD is the length of the private data (connect, accept, reject).
	PD int
	// Opt is the option set (set_option).
	Opt OptKind
	// Group and SendOnly name a multicast join (join, leave).
	Group    int
	SendOnly bool
	// Probe makes the call on the fabric's endpoint directly, past the
	// library's state check: how the fabric itself answers a call the
	// model refuses. It can leave the id in a state the library does not
	// know, so a generated sequence makes one probe, last.
	Probe bool
}

// Seq is a sequence of operations.
type Seq []Op

// portSpaces names the port spaces in a sequence's text; others are
// written ps0xNNNN.
var portSpaces = [...]struct {
	ps   id.PortSpace
	name string
}{{id.PSTCP, "tcp"}, {id.PSUDP, "udp"}, {id.PSIB, "ib"}, {id.PSIPoIB, "ipoib"}}

func psName(ps id.PortSpace) string {
	for _, p := range portSpaces {
		if p.ps == ps {
			return p.name
		}
	}
	return fmt.Sprintf("ps%#x", uint16(ps))
}

func parsePS(s string) (id.PortSpace, error) {
	for _, p := range portSpaces {
		if p.name == s {
			return p.ps, nil
		}
	}
	if h, ok := strings.CutPrefix(s, "ps0x"); ok {
		if v, err := strconv.ParseUint(h, 16, 16); err == nil {
			return id.PortSpace(v), nil
		}
	}
	return 0, fmt.Errorf("unknown port space %q", s)
}

// String formats the operation on one line, as Parse reads it.
func (op Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "s%d ", op.Slot)
	if op.Probe {
		b.WriteString("probe ")
	}
	b.WriteString(op.Call.String())
	switch op.Call {
	case journal.CallCreate:
		fmt.Fprintf(&b, " %s %s", psName(op.PS), chanName(op.Chan))
		if op.Peer {
			b.WriteString(" peer")
		}
	case journal.CallBind:
		fmt.Fprintf(&b, " %s:%d", op.Addr, op.Port)
	case journal.CallResolveAddr:
		fmt.Fprintf(&b, " %s:%d", op.Addr, op.Port)
		if op.Src {
			b.WriteString(" src")
		}
	case journal.CallListen:
		fmt.Fprintf(&b, " %d", op.Backlog)
	case journal.CallConnect, journal.CallAccept, journal.CallReject:
		fmt.Fprintf(&b, " pd=%d", op.PD)
	case journal.CallSetOption:
		fmt.Fprintf(&b, " %s", op.Opt)
	case journal.CallMigrate:
		fmt.Fprintf(&b, " %s", chanName(op.Chan))
	case journal.CallJoin, journal.CallLeave:
		fmt.Fprintf(&b, " g%d", op.Group)
		if op.SendOnly {
			b.WriteString(" sendonly")
		}
	}
	return b.String()
}

func chanName(c int) string {
	if c == ChanSync {
		return "sync"
	}
	return fmt.Sprintf("ch%d", c)
}

// String formats the sequence, one operation a line.
func (s Seq) String() string {
	var b strings.Builder
	for _, op := range s {
		b.WriteString(op.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Parse reads a sequence in the form String writes. Blank lines and lines
// starting with # are skipped; ';' separates operations too.
func Parse(text string) (Seq, error) {
	var seq Seq
	lines := strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ';' })
	for n, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		op, err := parseOp(line)
		if err != nil {
			return nil, fmt.Errorf("callseq: operation %d %q: %w", n+1, line, err)
		}
		seq = append(seq, op)
	}
	return seq, nil
}

func parseOp(line string) (Op, error) {
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "s") {
		return Op{}, fmt.Errorf("want \"s<slot> <call> ...\"")
	}
	slot, err := strconv.Atoi(f[0][1:])
	if err != nil || slot < 0 {
		return Op{}, fmt.Errorf("bad slot %q", f[0])
	}
	op := Op{Slot: slot}
	if f[1] == "probe" {
		op.Probe, f = true, f[1:]
		if len(f) < 2 {
			return op, fmt.Errorf("probe of what call?")
		}
	}
	c, ok := CallByName(f[1])
	if !ok {
		return Op{}, fmt.Errorf("unknown call %q", f[1])
	}
	op.Call = c
	args := f[2:]
	need := func(n int) error {
		if len(args) < n {
			return fmt.Errorf("%s takes %d arguments", c, n)
		}
		return nil
	}
	switch c {
	case journal.CallCreate:
		if err := need(2); err != nil {
			return op, err
		}
		if op.PS, err = parsePS(args[0]); err != nil {
			return op, err
		}
		if op.Chan, err = parseChan(args[1]); err != nil {
			return op, err
		}
		for _, a := range args[2:] {
			if a != "peer" {
				return op, fmt.Errorf("unknown flag %q", a)
			}
			op.Peer = true
		}
	case journal.CallBind, journal.CallResolveAddr:
		if err := need(1); err != nil {
			return op, err
		}
		if op.Addr, op.Port, err = parseAddr(args[0]); err != nil {
			return op, err
		}
		for _, a := range args[1:] {
			if a != "src" || c != journal.CallResolveAddr {
				return op, fmt.Errorf("unknown flag %q", a)
			}
			op.Src = true
		}
	case journal.CallListen:
		if err := need(1); err != nil {
			return op, err
		}
		if op.Backlog, err = strconv.Atoi(args[0]); err != nil {
			return op, fmt.Errorf("bad backlog %q", args[0])
		}
	case journal.CallConnect, journal.CallAccept, journal.CallReject:
		if err := need(1); err != nil {
			return op, err
		}
		v, ok := strings.CutPrefix(args[0], "pd=")
		if op.PD, err = strconv.Atoi(v); !ok || err != nil || op.PD < 0 {
			return op, fmt.Errorf("bad private data length %q", args[0])
		}
	case journal.CallSetOption:
		if err := need(1); err != nil {
			return op, err
		}
		k := -1
		for i, n := range optNames {
			if n == args[0] {
				k = i
			}
		}
		if k < 0 {
			return op, fmt.Errorf("unknown option %q", args[0])
		}
		op.Opt = OptKind(k)
	case journal.CallMigrate:
		if err := need(1); err != nil {
			return op, err
		}
		if op.Chan, err = parseChan(args[0]); err != nil {
			return op, err
		}
	case journal.CallJoin, journal.CallLeave:
		if err := need(1); err != nil {
			return op, err
		}
		g, ok := strings.CutPrefix(args[0], "g")
		if op.Group, err = strconv.Atoi(g); !ok || err != nil || op.Group < 0 || op.Group >= NumGroups {
			return op, fmt.Errorf("bad group %q", args[0])
		}
		for _, a := range args[1:] {
			if a != "sendonly" {
				return op, fmt.Errorf("unknown flag %q", a)
			}
			op.SendOnly = true
		}
	}
	return op, nil
}

// CallByName returns the call whose String is s.
func CallByName(s string) (journal.Call, bool) {
	for c := journal.CallCreate; c <= journal.CallDestroy; c++ {
		if c.String() == s {
			return c, true
		}
	}
	return 0, false
}

func parseChan(s string) (int, error) {
	switch s {
	case "ch0":
		return 0, nil
	case "ch1":
		return 1, nil
	case "sync":
		return ChanSync, nil
	}
	return 0, fmt.Errorf("bad channel %q (ch0, ch1 or sync)", s)
}

func parseAddr(s string) (AddrKind, int, error) {
	name, port, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("bad address %q (kind:port)", s)
	}
	k := -1
	for i, n := range addrNames {
		if n == name {
			k = i
		}
	}
	p, err := strconv.Atoi(port)
	if k < 0 || err != nil || p < 0 || p >= NumPorts {
		return 0, 0, fmt.Errorf("bad address %q", s)
	}
	return AddrKind(k), p, nil
}
