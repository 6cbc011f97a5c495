// The README's tour, verbatim: readme_test.go checks that each Go block of
// README.md is the same text as here, so what compiles and runs here is
// what the README shows. Edit both together.

package readme

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
	"github.com/cmrt/cmrt/reactor/promcollector"
	"github.com/cmrt/cmrt/rsocket"
)

func resolve(dst netip.AddrPort) error {
	ch, err := channel.New() // rdma_create_event_channel
	if err != nil {
		return err
	}
	defer ch.Close()
	cm, err := id.Create(ch, "my context", id.PSTCP) // rdma_create_id
	if err != nil {
		return err
	}
	defer cm.Destroy()
	if err := cm.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
		return err
	}
	ev, err := ch.GetEvent() // RDMA_CM_EVENT_ADDR_RESOLVED
	if err != nil {
		return err
	}
	fmt.Println(ev.Type, ev.ID.Context()) // RDMA_CM_EVENT_ADDR_RESOLVED my context
	return ch.Ack(ev)
}

func dial(ctx context.Context, dst netip.AddrPort) (*id.ID, error) {
	cm, err := id.Create(nil, nil, id.PSTCP)
	if err != nil {
		return nil, err
	}
	err = cm.ResolveAddr(netip.AddrPort{}, dst, time.Second)
	if err == nil {
		err = cm.ResolveRoute(time.Second)
	}
	if err == nil {
		err = cm.ConnectContext(ctx, &id.ConnParam{PrivateData: []byte("hello")})
	}
	if err != nil {
		cm.Destroy()
		return nil, err
	}
	fmt.Println(cm.Event().Type) // RDMA_CM_EVENT_ESTABLISHED
	return cm, nil
}

func dialEP(ctx context.Context, host, port string) (*id.ID, error) {
	ai, err := id.GetAddrInfo(ctx, host, port, nil) // *id.AddrInfoError: EAI_* codes
	if err != nil {
		return nil, err
	}
	cm, err := id.CreateEP(ctx, ai, &id.QPInitAttr{SigAll: true})
	if err != nil {
		return nil, err
	}
	if err := cm.Connect(nil); err != nil {
		cm.Destroy()
		return nil, err
	}
	return cm, nil
}

func serve(ctx context.Context, addr netip.AddrPort) error {
	ch, err := channel.New()
	if err != nil {
		return err
	}
	defer ch.Close()
	r, err := reactor.New(reactor.WithWorkers(8))
	if err != nil {
		return err
	}
	defer r.Close(context.Background())
	mux := handlers.New().
		OnConnectRequest(func(ev *id.Event) error { return ev.ID.Accept(nil) }).
		OnDisconnected(func(ev *id.Event) error { return ev.ID.Destroy() })
	if err := r.Register(ch, mux); err != nil {
		return err
	}
	listener, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		return err
	}
	defer listener.Destroy()
	if err := listener.Bind(addr); err != nil {
		return err
	}
	if err := listener.Listen(0); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func echo(addr string) error {
	l, err := rsocket.Listen("tcp", addr) // rlisten: a net.Listener
	if err != nil {
		return err
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept() // raccept: a net.Conn (*rsocket.Conn)
		if err == nil {
			_, err = io.Copy(c, c) // until the client's CloseWrite
			c.Close()
		}
		done <- err
	}()
	c, err := rsocket.Dial("tcp", l.Addr().String()) // rconnect
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprint(c, "hello over RDMA")
	c.(*rsocket.Conn).CloseWrite() // rshutdown(SHUT_WR)
	reply, err := io.ReadAll(c)    // up to the server's Close
	if err != nil {
		return err
	}
	fmt.Println(string(reply)) // hello over RDMA
	return <-done
}

func metricsHandler(r *reactor.Reactor) (http.Handler, func()) {
	c := promcollector.New(promcollector.WithReactor("server", r))
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), c.Close // serve at /metrics
}
