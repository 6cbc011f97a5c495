package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/id"
)

// The Go counterpart of rdma-core's ibv_rc_pingpong, for the same-boot
// latency ratio of BENCHMARKS.md part 7: the same message loop (each side
// keeps receives posted; the client sends, and each side sends again once
// its previous send completed and the peer's message arrived), the same
// defaults (4096-byte messages, 1000 iterations, 500 receives, inline when
// the QP takes the size, busy polling unless -e) and the same result line,
// "N iters in S seconds = U usec/iter". The connection is made with the CM
// (ids) instead of ibv_rc_pingpong's TCP exchange, and the send and receive
// completions come from the id's two CQs instead of one shared CQ; neither
// is inside the timed loop.
//
// After the result line it prints what the loop cost the process per
// iteration (user and system CPU time, context switches, empty polls) and,
// with -threads, each thread's share: where the runtime's own threads
// (sysmon, idle Ms) take time from the loop's.
//
//	kcheck pp-server -b IP [-p PORT] [-size N] [-iters N] [-e] [-threads]
//	kcheck pp-client -s IP [-p PORT] [-size N] [-iters N] [-e] [-threads]

const (
	ppRecvWRID = 1
	ppSendWRID = 2
	ppRxDepth  = 500
)

func pingpong(ctx context.Context, server bool) error {
	kf := id.WithFabric(fab)
	var c *id.ID
	attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 1, MaxRecvWR: ppRxDepth, MaxSendSGE: 1, MaxRecvSGE: 1,
		MaxInlineData: *ppSize}}
	param := &id.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if server {
		lis, err := id.Create(nil, nil, id.PSTCP, kf)
		if err != nil {
			return err
		}
		defer lis.Destroy()
		if err := lis.Bind(addrPort(*bindAddr)); err != nil {
			return err
		}
		if err := lis.Listen(0); err != nil {
			return err
		}
		if c, err = lis.GetRequestContext(ctx); err != nil {
			return err
		}
		defer c.Destroy()
		if err := setupPP(c, attr); err != nil {
			return err
		}
		if err := c.AcceptContext(ctx, param); err != nil {
			return err
		}
	} else {
		var err error
		if c, err = id.Create(nil, nil, id.PSTCP, kf); err != nil {
			return err
		}
		defer c.Destroy()
		if err := c.ResolveAddrContext(ctx, netip0, addrPort(*srvAddr), 2*time.Second); err != nil {
			return err
		}
		if err := c.ResolveRouteContext(ctx, 2*time.Second); err != nil {
			return err
		}
		if err := setupPP(c, attr); err != nil {
			return err
		}
		if err := c.ConnectContext(ctx, param); err != nil {
			return err
		}
	}
	err := ppLoop(ctx, c, !server)
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = c.DisconnectContext(dctx)
	return err
}

var ppBufs = map[*id.ID]*ppState{}

type ppState struct {
	buf    []byte
	mr     id.MR
	inline bool
}

func setupPP(c *id.ID, attr *id.QPInitAttr) error {
	// Inline sends when the QP takes the size (ibv_rc_pingpong asks the QP
	// what it got; here a size above the device's limit is refused).
	if err := c.CreateQP(attr); err != nil {
		attr.Cap.MaxInlineData = 0
		if err := c.CreateQP(attr); err != nil {
			return err
		}
	}
	s := &ppState{buf: make([]byte, *ppSize)}
	var err error
	if s.mr, err = c.RegMsgs(s.buf); err != nil {
		return err
	}
	s.inline = *ppSize <= attr.Cap.MaxInlineData
	ppBufs[c] = s
	// The receives are posted before the connection, as ibv_rc_pingpong
	// posts them before it exchanges the QP numbers.
	for k := 0; k < ppRxDepth; k++ {
		if err := c.PostRecv(ppRecvWRID, s.buf, s.mr); err != nil {
			return err
		}
	}
	return nil
}

// ppLoop is ibv_rc_pingpong's timed loop.
func ppLoop(ctx context.Context, c *id.ID, client bool) error {
	s := ppBufs[c]
	qp := c.QP()
	scq, rcq := qp.SendCQ(), qp.RecvCQ()
	flags := id.SendSignaled
	if s.inline {
		flags |= id.SendInline
	}
	send := func() error { return c.PostSend(ppSendWRID, s.buf, s.mr, flags) }
	pending := ppRecvWRID
	if client {
		if err := send(); err != nil {
			return err
		}
		pending |= ppSendWRID
	}
	iters := *ppIters
	routs := ppRxDepth
	var wcs [2]id.WC
	cqs := [2]id.CQ{scq, rcq}
	var th0 map[string]threadStat
	if *ppThreads {
		th0 = threadStats()
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	scnt, rcnt, empty := 0, 0, 0
	for rcnt < iters || scnt < iters {
		if ctx.Err() != nil {
			return fmt.Errorf("after %d/%d iterations: %w", scnt, rcnt, ctx.Err())
		}
		got := 0
		for _, cq := range cqs {
			n := cq.Poll(wcs[:])
			got += n
			for _, wc := range wcs[:n] {
				if wc.Status != id.WCSuccess {
					return fmt.Errorf("failed status %s for wr_id %d", wc.Status, wc.WRID)
				}
				switch wc.WRID {
				case ppSendWRID:
					scnt++
				case ppRecvWRID:
					if routs--; routs <= 1 {
						for ; routs < ppRxDepth; routs++ {
							if err := c.PostRecv(ppRecvWRID, s.buf, s.mr); err != nil {
								return err
							}
						}
					}
					rcnt++
				}
				pending &^= int(wc.WRID)
				if scnt < iters && pending == 0 {
					if err := send(); err != nil {
						return err
					}
					pending = ppRecvWRID | ppSendWRID
				}
			}
		}
		if got == 0 {
			empty++
		}
		if got == 0 && *ppEvents {
			// ibv_get_cq_event on the queue of what is awaited.
			cq := rcq
			if pending&ppRecvWRID == 0 {
				cq = scq
			}
			if err := cq.Wait(ctx); err != nil {
				return err
			}
		}
	}
	el := time.Since(start)
	if *ppThreads {
		printThreadStats(th0, threadStats(), iters)
	}
	usec := float64(el.Microseconds())
	bytes := int64(*ppSize) * int64(iters) * 2
	fmt.Printf("%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec/1e6, usec/float64(iters))
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(a, b syscall.Timeval) float64 { return float64(b.Nano()-a.Nano()) / 1e3 / float64(iters) }
	// Not in ibv_rc_pingpong's output: the process's CPU time and context
	// switches over the timed loop, per iteration, and the empty polls.
	fmt.Printf("per iter: user %.1f usec, sys %.1f usec, %.2f voluntary and %.2f involuntary context switches, %.1f empty polls\n",
		tv(ru0.Utime, ru.Utime), tv(ru0.Stime, ru.Stime), float64(ru.Nvcsw-ru0.Nvcsw)/float64(iters),
		float64(ru.Nivcsw-ru0.Nivcsw)/float64(iters), float64(empty)/float64(iters))
	return nil
}
