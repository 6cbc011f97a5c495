// Command rdma_client is librdmacm's rdma_client over cmrt: the minimal
// synchronous client. Its id has no event channel, so every call blocks
// until its outcome, as with rdma_create_ep and a NULL channel in C.
//
//	rdma_client [-s server_address (127.0.0.1)] [-p port_number (7471)]
//
// It resolves the server's address and route, creates a QP (one send and
// one receive work request, 16 bytes inline, every send signaled),
// registers a 16-byte buffer, posts a receive, connects, sends 16 bytes,
// waits for the send and the receive completions and disconnects.
//
// Output and behaviour are rdma-core's: "rdma_client: start", then
// "rdma_client: end N" with the value rdma-core's run() returns (0, -1
// after a failed librdmacm call, or a getaddrinfo EAI_* code); a failed call
// is reported on stderr as perror(3) would ("rdma_connect: Connection
// refused"), followed by cmrt's own account in parentheses. The exit status
// is rdma-core's: 1 on a usage error, otherwise the value of "end N" & 0xff
// (255 for -1).
//
// The id lives on the software fabric unless CMRT_FABRIC names another
// one; the software fabric speaks iWARP, so this client also talks to
// rdma-core's rdma_server on a soft-iWARP (siw) device.
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
	prog    = "rdma_client"
	msgSize = 16
)

func main() { os.Exit(run(tool.Args(), os.Stdout, os.Stderr)) }

type client struct {
	server, port   string
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
	c := &client{server: "127.0.0.1", port: "7471", stdout: stdout, stderr: stderr}
	opts, _, err := tool.Getopt(argv[1:], "s:p:")
	if err != nil {
		tool.PrintGetoptError(stderr, argv[0], err)
		usage(stdout, argv[0])
		return tool.ExitFailure
	}
	for _, o := range opts {
		switch o.Name {
		case 's':
			c.server = o.Arg
		case 'p':
			c.port = o.Arg
		}
	}
	fmt.Fprintf(stdout, "%s: start\n", prog)
	ret := c.run()
	fmt.Fprintf(stdout, "%s: end %d\n", prog, ret)
	return tool.ExitStatus(ret)
}

func (c *client) perror(what string, err error) { tool.Perror(c.stderr, what, err) }

// run is rdma-core's run(): 0 on success, -1 after a failed call, or the
// getaddrinfo error code.
func (c *client) run() int {
	ctx := context.Background()
	ai, err := id.GetAddrInfo(ctx, c.server, c.port, &id.AddrInfo{PortSpace: id.PSTCP})
	if err != nil {
		fmt.Fprintf(c.stdout, "rdma_getaddrinfo: %v\n", err)
		return err.(*id.AddrInfoError).Code
	}
	f, err := tool.Fabric()
	if err != nil {
		c.perror("rdma_create_ep", err)
		return -1
	}
	attr := &id.QPInitAttr{
		Cap:    id.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: msgSize},
		SigAll: true,
	}
	cm, err := id.CreateEP(ctx, ai, attr, id.WithFabric(f))
	if err != nil {
		c.perror("rdma_create_ep", err)
		return -1
	}
	defer cm.Destroy()
	defer cm.DestroyQP()

	// The QP takes 16 bytes inline (the software fabric's minimum is 256),
	// so the send needs no registration: rdma-core's IBV_SEND_INLINE path.
	var recvMsg, sendMsg [msgSize]byte
	mr, err := cm.RegMsgs(recvMsg[:])
	if err != nil {
		c.perror("rdma_reg_msgs for recv_msg", err)
		return -1
	}
	defer cm.DeregMR(mr)

	if err := cm.PostRecv(0, recvMsg[:], mr); err != nil {
		c.perror("rdma_post_recv", err)
		return -1
	}
	if err := cm.Connect(nil); err != nil {
		c.perror("rdma_connect", err)
		return -1
	}
	defer cm.Disconnect()

	if err := cm.PostSend(0, sendMsg[:], nil, id.SendInline); err != nil {
		c.perror("rdma_post_send", err)
		return -1
	}
	if err := complete(cm.GetSendComp(ctx)); err != nil {
		c.perror("rdma_get_send_comp", err)
		return -1
	}
	if err := complete(cm.GetRecvComp(ctx)); err != nil {
		c.perror("rdma_get_recv_comp", err)
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
