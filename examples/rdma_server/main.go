// Command rdma_server is librdmacm's rdma_server over cmrt: the minimal
// synchronous server. Its ids have no event channel, so every call blocks
// until its outcome, as with rdma_create_ep and a NULL channel in C.
//
//	rdma_server [-s server_address (0.0.0.0)] [-p port_number (7471)]
//
// It binds and listens, takes one connection request (rdma_get_request),
// gives the new id a QP (one send and one receive work request, 16 bytes
// inline, every send signaled), registers a 16-byte buffer, posts a receive,
// accepts, waits for the receive completion, sends the 16 bytes back, waits
// for the send completion and disconnects.
//
// Output and behaviour are rdma-core's: "rdma_server: start", then
// "rdma_server: end N" with the value rdma-core's run() returns (0, -1
// after a failed librdmacm call, or a getaddrinfo EAI_* code); a failed call
// is reported on stderr as perror(3) would ("rdma_listen: Address already
// in use"), followed by cmrt's own account in parentheses. The exit status
// is rdma-core's: 1 on a usage error, otherwise the value of "end N" & 0xff
// (255 for -1).
//
// The id lives on the software fabric unless CMRT_FABRIC names another
// one.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/id"
)

const (
	prog    = "rdma_server"
	msgSize = 16
)

func main() { os.Exit(run(tool.Args(), os.Stdout, os.Stderr)) }

type server struct {
	addr, port     string
	stdout, stderr io.Writer
}

func usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprintf(w, "\t[-s server_address]\n")
	fmt.Fprintf(w, "\t[-p port_number]\n")
}

// run is the program: argv is its command line, program name first, as C's
// main gets it; the result is the exit status, C's: 1 on a usage error,
// otherwise what rdma-core's run() returns, & 0xff (-1 exits 255).
func run(argv []string, stdout, stderr io.Writer) int {
	s := &server{addr: "0.0.0.0", port: "7471", stdout: stdout, stderr: stderr}
	opts, _, err := tool.Getopt(argv[1:], "s:p:")
	if err != nil {
		tool.PrintGetoptError(stderr, argv[0], err)
		usage(stdout, argv[0])
		return tool.ExitFailure
	}
	for _, o := range opts {
		switch o.Name {
		case 's':
			s.addr = o.Arg
		case 'p':
			s.port = o.Arg
		}
	}
	fmt.Fprintf(stdout, "%s: start\n", prog)
	ret := s.run()
	fmt.Fprintf(stdout, "%s: end %d\n", prog, ret)
	return tool.ExitStatus(ret)
}

func (s *server) perror(what string, err error) { tool.Perror(s.stderr, what, err) }

// run is rdma-core's run(): 0 on success, -1 after a failed call, or the
// getaddrinfo error code.
func (s *server) run() int {
	ctx := context.Background()
	ai, err := id.GetAddrInfo(ctx, s.addr, s.port, &id.AddrInfo{Flags: id.AIPassive, PortSpace: id.PSTCP})
	if err != nil {
		fmt.Fprintf(s.stdout, "rdma_getaddrinfo: %v\n", err)
		return err.(*id.AddrInfoError).Code
	}

	// rdma_create_ep on a passive address: a synchronous id, bound; each
	// request's id gets a QP with attr.
	f, err := tool.Fabric()
	if err != nil {
		s.perror("rdma_create_ep", err)
		return -1
	}
	attr := &id.QPInitAttr{
		Cap:    id.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: msgSize},
		SigAll: true,
	}
	listenID, err := id.CreateEP(ctx, ai, attr, id.WithFabric(f))
	if err != nil {
		s.perror("rdma_create_ep", err)
		return -1
	}
	defer listenID.Destroy()

	if err := listenID.Listen(0); err != nil {
		s.perror("rdma_listen", err)
		return -1
	}

	cm, err := listenID.GetRequest()
	if err != nil {
		s.perror("rdma_get_request", err)
		return -1
	}
	defer cm.Destroy()
	defer cm.DestroyQP()

	// The QP takes 16 bytes inline (the software fabric's minimum is 256),
	// so the send needs no registration: rdma-core's IBV_SEND_INLINE path.
	var recvMsg, sendMsg [msgSize]byte
	mr, err := cm.RegMsgs(recvMsg[:])
	if err != nil {
		s.perror("rdma_reg_msgs for recv_msg", err)
		return -1
	}
	defer cm.DeregMR(mr)

	if err := cm.PostRecv(0, recvMsg[:], mr); err != nil {
		s.perror("rdma_post_recv", err)
		return -1
	}
	if err := cm.Accept(nil); err != nil {
		s.perror("rdma_accept", err)
		return -1
	}
	defer cm.Disconnect()

	if err := complete(cm.GetRecvComp(ctx)); err != nil {
		s.perror("rdma_get_recv_comp", err)
		return -1
	}
	sendMsg = recvMsg // the 16 bytes go back
	if err := cm.PostSend(0, sendMsg[:], nil, id.SendInline); err != nil {
		s.perror("rdma_post_send", err)
		return -1
	}
	if err := complete(cm.GetSendComp(ctx)); err != nil {
		s.perror("rdma_get_send_comp", err)
		return -1
	}
	return 0
}

// complete turns a work completion with an error status into an error
// (rdma-core's programs do not look at the status).
func complete(wc id.WC, err error) error {
	if err != nil {
		return err
	}
	if wc.Status != id.WCSuccess {
		return fmt.Errorf("work completion status %d, %s", wc.Status, wc.Status)
	}
	return nil
}
