package soft_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// syncBuf is a log sink the loop may write while the test reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rawServerSide is a Go listener taking connections from a raw peer.
type rawServerSide struct {
	f     *soft.Fabric
	ch    *rcChan
	lis   *id.ID
	port  string
	ids   []*id.ID
	write id.MR // a 64-byte remote-writable region of the last accepted id
	read  id.MR // a 64-byte remote-readable one
}

// rawAccept dials the Go listener from a raw TCP peer, sends req, lets the
// Go side create its QP (one 64-byte receive posted) and accept, and reads
// the Reply.
func (s *rawServerSide) rawAccept(tb testing.TB, req iwarp.MPAFrame, wantEstablished bool) (net.Conn, iwarp.MPAFrame) {
	tb.Helper()
	c, err := net.Dial("tcp", "127.0.0.1:"+s.port)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := iwarp.AppendMPA(nil, &req)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		tb.Fatal(err)
	}
	e := acceptNext(tb, s.ch, id.QPInitAttr{}, func(tb testing.TB, e *rcEnd) {
		buf := make([]byte, 64)
		m := reg(tb, e, buf, id.AccessLocalWrite)
		if err := e.qp.PostRecv(&id.RecvWR{WRID: 1, Buf: buf, MR: m}); err != nil {
			tb.Fatal(err)
		}
		s.write = reg(tb, e, make([]byte, 64), id.AccessLocalWrite|id.AccessRemoteWrite)
		s.read = reg(tb, e, make([]byte, 64), id.AccessRemoteRead)
	})
	s.ids = append(s.ids, e.id)
	if wantEstablished {
		s.ch.want(tb, id.EventEstablished)
	}
	f, extra := readMPA(tb, c)
	if len(extra) > 0 {
		tb.Fatalf("%d bytes glued to the MPA Reply", len(extra))
	}
	return c, f
}

func (s *rawServerSide) close(tb testing.TB) {
	for _, i := range s.ids {
		_ = i.Destroy()
	}
	_ = s.lis.Destroy()
	_ = s.ch.src.Close()
}

func newRawServerSide(tb testing.TB, f *soft.Fabric) *rawServerSide {
	s := &rawServerSide{f: f, ch: newRCChan(tb, f)}
	s.lis = listen(tb, s.ch)
	s.port = strconv.Itoa(int(s.lis.LocalAddr().Port()))
	return s
}

func enhancedReq(crc bool) iwarp.MPAFrame {
	return iwarp.MPAFrame{Rev: iwarp.MPARev2, Enhanced: true, CRC: crc, IRD: 1, ORD: 1}
}

// TestRCMalformed sends hand-crafted bad FPDUs after a real MPA exchange:
// each closes only its connection, with DISCONNECTED on its id and, where
// siw sends one, a Terminate with siw's layer, type and code. A Go-to-Go
// connection on the same fabric keeps working throughout.
func TestRCMalformed(t *testing.T) {
	send := func(msn uint32, n int) iwarp.Header {
		return iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: msn}
	}
	type tc struct {
		name  string
		crc   bool
		bytes func(s *rawServerSide, crc bool) []byte
		term  *iwarp.Terminate // nil: no Terminate expected
	}
	term := func(l iwarp.Layer, et, ec uint8) *iwarp.Terminate {
		return &iwarp.Terminate{Layer: l, EType: et, ECode: ec}
	}
	cases := []tc{
		{"bad-crc", true, func(_ *rawServerSide, crc bool) []byte {
			b := soft.FPDU(send(1, 8), make([]byte, 8), crc)
			b[len(b)-1] ^= 0x55
			return b
		}, term(iwarp.LayerLLP, iwarp.LLPETypeMPA, iwarp.LLPECodeReceivedCRC)},
		{"bad-ddp-version", false, func(_ *rawServerSide, crc bool) []byte {
			b := soft.FPDU(send(1, 8), make([]byte, 8), crc)
			b[2] = b[2]&^3 | 2
			return recrc(b, crc)
		}, term(iwarp.LayerDDP, iwarp.DDPETypeUntaggedBuf, iwarp.DDPECodeUTVersion)},
		{"bad-rdmap-version", true, func(_ *rawServerSide, crc bool) []byte {
			b := soft.FPDU(send(1, 8), make([]byte, 8), crc)
			b[3] = b[3]&^0xc0 | 0x80
			return recrc(b, crc)
		}, term(iwarp.LayerRDMAP, iwarp.RDMAPETypeRemoteOperation, iwarp.RDMAPECodeVersion)},
		{"unknown-opcode", false, func(_ *rawServerSide, crc bool) []byte {
			b := soft.FPDU(send(1, 8), make([]byte, 8), crc)
			b[3] = b[3]&^0x0f | 9
			return recrc(b, crc)
		}, term(iwarp.LayerRDMAP, iwarp.RDMAPETypeRemoteOperation, iwarp.RDMAPECodeOpcode)},
		{"truncated-header", false, func(_ *rawServerSide, crc bool) []byte {
			return rawULPDU([]byte{0x41, 0x43, 0, 0, 0, 0}, crc)
		}, term(iwarp.LayerDDP, iwarp.DDPETypeCatastrophic, iwarp.DDPECodeCatastrophic)},
		{"oversize-send", true, func(_ *rawServerSide, crc bool) []byte {
			return soft.FPDU(send(1, 100), make([]byte, 100), crc) // the receive holds 64
		}, term(iwarp.LayerDDP, iwarp.DDPETypeUntaggedBuf, iwarp.DDPECodeUTInvalidMSNNoBuf)},
		{"second-send-no-receive", false, func(_ *rawServerSide, crc bool) []byte {
			return append(soft.FPDU(send(1, 0), nil, crc), soft.FPDU(send(2, 0), nil, crc)...)
		}, term(iwarp.LayerDDP, iwarp.DDPETypeUntaggedBuf, iwarp.DDPECodeUTInvalidMSNNoBuf)},
		{"oversize-read-request", false, func(_ *rawServerSide, crc bool) []byte {
			b := soft.FPDU(iwarp.Header{Op: iwarp.OpReadRequest, Last: true, MSN: 1}, nil, crc)
			u := append(append([]byte(nil), b[2:2+iwarp.ReadRequestLen]...), 1, 2, 3, 4)
			return rawULPDU(u, crc)
		}, term(iwarp.LayerDDP, iwarp.DDPETypeUntaggedBuf, iwarp.DDPECodeUTMsgTooLong)},
		{"bad-msn", false, func(_ *rawServerSide, crc bool) []byte {
			return soft.FPDU(send(5, 0), nil, crc)
		}, term(iwarp.LayerDDP, iwarp.DDPETypeUntaggedBuf, iwarp.DDPECodeUTInvalidMSNRange)},
		{"write-bad-stag", false, func(_ *rawServerSide, crc bool) []byte {
			return soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: 0x1234}, make([]byte, 8), crc)
		}, term(iwarp.LayerDDP, iwarp.DDPETypeTaggedBuf, iwarp.DDPECodeTInvalidSTag)},
		{"write-out-of-bounds", true, func(s *rawServerSide, crc bool) []byte {
			return soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: s.write.RKey(), TO: s.write.Addr() + 60}, make([]byte, 8), crc)
		}, term(iwarp.LayerDDP, iwarp.DDPETypeTaggedBuf, iwarp.DDPECodeTBaseBounds)},
		{"read-no-access", false, func(s *rawServerSide, crc bool) []byte {
			return soft.FPDU(iwarp.Header{Op: iwarp.OpReadRequest, Last: true, MSN: 1,
				Read: iwarp.ReadRequest{SinkSTag: 9, Size: 8, SrcSTag: s.write.RKey(), SrcTO: s.write.Addr()}}, nil, crc)
		}, term(iwarp.LayerRDMAP, iwarp.RDMAPETypeRemoteProtection, iwarp.RDMAPECodeAccessRights)},
		{"reads-over-ird", false, func(s *rawServerSide, crc bool) []byte {
			r := func(msn uint32) []byte {
				return soft.FPDU(iwarp.Header{Op: iwarp.OpReadRequest, Last: true, MSN: msn,
					Read: iwarp.ReadRequest{SinkSTag: 9, Size: 8, SrcSTag: s.read.RKey(), SrcTO: s.read.Addr()}}, nil, crc)
			}
			return append(r(1), r(2)...) // IRD is 1
		}, term(iwarp.LayerRDMAP, iwarp.RDMAPETypeRemoteOperation, iwarp.RDMAPECodeCatastrophicStream)},
		{"unexpected-read-response", false, func(_ *rawServerSide, crc bool) []byte {
			return soft.FPDU(iwarp.Header{Op: iwarp.OpReadResponse, Last: true, STag: 1}, make([]byte, 4), crc)
		}, term(iwarp.LayerDDP, iwarp.DDPETypeCatastrophic, iwarp.DDPECodeCatastrophic)},
		{"fin-mid-fpdu", false, func(_ *rawServerSide, crc bool) []byte {
			return soft.FPDU(send(1, 40), make([]byte, 40), crc)[:30]
		}, nil},
		{"terminate-from-peer", true, func(_ *rawServerSide, crc bool) []byte {
			return soft.FPDU(iwarp.Header{Op: iwarp.OpTerminate, Last: true, MSN: 1,
				Term: iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: 2, ECode: 6}}, nil, crc)
		}, nil},
	}

	logs := &syncBuf{}
	f := soft.New(soft.WithLogger(zerolog.New(logs).Level(zerolog.DebugLevel)))
	// The bystander: a Go-to-Go connection on the same fabric.
	by := newPair(t, pairOpts{srvFab: f})
	ping := func() {
		t.Helper()
		_ = by.srv.id.PostRecv(1, nil, nil)
		_ = by.cli.id.PostSend(2, nil, nil, 0)
		wantWC(t, comp(t, by.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
	}
	s := newRawServerSide(t, f)
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			c, _ := s.rawAccept(t, enhancedReq(k.crc), true)
			defer c.Close()
			if _, err := c.Write(k.bytes(s, k.crc)); err != nil {
				t.Fatal(err)
			}
			if k.name == "fin-mid-fpdu" {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			s.ch.want(t, id.EventDisconnected)
			us := readULPDUs(t, c, k.crc, nil)
			var got *iwarp.Terminate
			for _, u := range us {
				var h iwarp.Header
				if _, err := iwarp.ParseULPDU(u, &h); err != nil {
					t.Fatalf("bad ULPDU from the fabric: %v", err)
				}
				if h.Op == iwarp.OpTerminate {
					if h.MSN != 1 || h.MO != 0 {
						t.Fatalf("Terminate MSN %d MO %d", h.MSN, h.MO)
					}
					got = &h.Term
				}
			}
			switch {
			case k.term == nil && got != nil:
				t.Fatalf("unexpected Terminate %+v", *got)
			case k.term != nil && got == nil:
				t.Fatalf("no Terminate, want %+v", *k.term)
			case k.term != nil && (got.Layer != k.term.Layer || got.EType != k.term.EType || got.ECode != k.term.ECode):
				t.Fatalf("Terminate %s/%d/%d, want %s/%d/%d", got.Layer, got.EType, got.ECode,
					k.term.Layer, k.term.EType, k.term.ECode)
			}
			// The id's posted receive is flushed (or was used).
			qp := s.ids[len(s.ids)-1].QP()
			if wc := comp(t, qp.RecvCQ()); wc.Status != id.WCWRFlushErr && wc.Status != id.WCSuccess && wc.Status != id.WCLocLenErr {
				t.Fatalf("receive completion %+v", wc)
			}
			ping()
		})
	}
	if !strings.Contains(logs.String(), `"layer":"DDP"`) || !strings.Contains(logs.String(), "Terminate") {
		t.Errorf("no debug log of the Terminates: %s", logs.String())
	}
	s.close(t)
	by.disconnect = true
	by.close()
}

// TestRCReplyWithFPDUs: a responder (like siw) may put FPDUs right behind
// its MPA Reply, whether or not the Go initiator asked for P2P mode (a
// responder may decline it); the Go initiator takes them.
func TestRCReplyWithFPDUs(t *testing.T) {
	for _, tc := range []struct {
		name string
		crc  bool
		p2p  soft.RTR // offered; siw's responder here declines it
	}{{"nocrc", false, 0}, {"crc", true, 0}, {"p2p-declined", false, soft.RTRWrite}} {
		crc := tc.crc
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			f := soft.New(soft.WithP2P(tc.p2p))
			ch := newRCChan(t, f)
			buf := make([]byte, 100)
			e := dial(t, ch, uint16(ln.Addr().(*net.TCPAddr).Port), id.QPInitAttr{}, nil, func(tb testing.TB, e *rcEnd) {
				m := reg(tb, e, buf, id.AccessLocalWrite)
				for k := 0; k < 2; k++ {
					_ = e.qp.PostRecv(&id.RecvWR{WRID: uint64(k), Buf: buf, MR: m})
				}
			})
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req, _ := readMPA(t, c)
			if !req.HasIRDORD() || req.CRC || req.P2P != (tc.p2p != 0) {
				t.Fatalf("request %+v", req)
			}
			rep := iwarp.MPAFrame{Reply: true, Rev: 2, Enhanced: true, CRC: crc, IRD: 1, ORD: 1}
			b, _ := iwarp.AppendMPA(nil, &rep)
			msg := pattern(100, 1)
			b = append(b, soft.FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, msg, crc)...)
			b = append(b, soft.FPDU(iwarp.Header{Op: iwarp.OpSendSE, Last: true, MSN: 2}, msg[:10], crc)...)
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			ch.want(t, id.EventEstablished)
			wc := comp(t, e.qp.RecvCQ())
			if wc.Status != id.WCSuccess || wc.ByteLen != 100 || wc.Solicited {
				t.Fatalf("%+v", wc)
			}
			wc = comp(t, e.qp.RecvCQ())
			if wc.Status != id.WCSuccess || wc.ByteLen != 10 || !wc.Solicited {
				t.Fatalf("%+v", wc)
			}
			sameBytes(t, buf[:10], msg[:10])
			// A send from the Go side: exactly siw's layout for 100 bytes.
			_ = e.id.PostSend(3, msg, nil, id.SendInline)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			out := make([]byte, 124)
			if _, err := io.ReadFull(c, out); err != nil {
				t.Fatal(err)
			}
			want := append([]byte{0x00, 0x76, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, msg...)
			want = append(want, 0, 0, 0, 0)
			if crc {
				binary.LittleEndian.PutUint32(want[120:], iwarp.CRC32c(want[:120]))
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("send on the wire:\n%x\nwant\n%x", out, want)
			}
			_ = c.Close()
			ch.want(t, id.EventDisconnected)
			_ = e.id.Destroy()
			_ = ch.src.Close()
			quiesceFabs(t, f)
		})
	}
}

// TestRCP2PWire checks the P2P bytes both ways: the Go initiator's RTRs
// (as siw expects them) and the Go responder waiting for the RTR before
// ESTABLISHED.
func TestRCP2PWire(t *testing.T) {
	t.Run("initiator", func(t *testing.T) {
		for _, rtr := range []soft.RTR{soft.RTRWrite, soft.RTRRead} {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			f := soft.New(soft.WithP2P(soft.RTRWrite | soft.RTRRead))
			ch := newRCChan(t, f)
			buf := make([]byte, 8)
			e := dial(t, ch, uint16(ln.Addr().(*net.TCPAddr).Port), id.QPInitAttr{}, nil, func(tb testing.TB, e *rcEnd) {
				_ = e.qp.PostRecv(&id.RecvWR{WRID: 1, Buf: buf, MR: reg(tb, e, buf, id.AccessLocalWrite)})
			})
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			req, _ := readMPA(t, c)
			if !req.P2P || !req.WriteRTR || !req.ReadRTR {
				t.Fatalf("request %+v", req)
			}
			rep := iwarp.MPAFrame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, P2P: true,
				WriteRTR: rtr == soft.RTRWrite, ReadRTR: rtr == soft.RTRRead}
			b, _ := iwarp.AppendMPA(nil, &rep)
			_, _ = c.Write(b)
			ch.want(t, id.EventEstablished)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if rtr == soft.RTRWrite {
				got := make([]byte, 20)
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatal(err)
				}
				want := []byte{0x00, 0x0e, 0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
				if !bytes.Equal(got, want) {
					t.Fatalf("write RTR %x, want %x", got, want)
				}
			} else {
				got := make([]byte, 52)
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatal(err)
				}
				var h iwarp.Header
				if _, err := iwarp.ParseULPDU(got[2:48], &h); err != nil || h.Op != iwarp.OpReadRequest || h.MSN != 1 || h.Read.Size != 0 {
					t.Fatalf("read RTR %x: %v %+v", got, err, h)
				}
				// Answer it, then send: the empty Read Response is consumed.
				b = soft.FPDU(iwarp.Header{Op: iwarp.OpReadResponse, Last: true, STag: h.Read.SinkSTag, TO: h.Read.SinkTO}, nil, false)
				_, _ = c.Write(b)
			}
			_, _ = c.Write(soft.FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, []byte("p2p!"), false))
			wc := comp(t, e.qp.RecvCQ())
			if wc.Status != id.WCSuccess || string(buf[:wc.ByteLen]) != "p2p!" {
				t.Fatalf("%+v %q", wc, buf)
			}
			_ = c.Close()
			ch.want(t, id.EventDisconnected)
			_ = e.id.Destroy()
			_ = ch.src.Close()
			_ = ln.Close()
			quiesceFabs(t, f)
		}
	})
	t.Run("initiator-default", func(t *testing.T) {
		// By default an initiator asks for P2P mode with a Write RTR only,
		// as siw's responder expects; WithP2P(0) asks for none, as siw's
		// initiator.
		for _, c := range []struct {
			name   string
			opts   []soft.Option
			p2p, w bool
		}{{"default", nil, true, true}, {"off", []soft.Option{soft.WithP2P(0)}, false, false}} {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			f := soft.New(c.opts...)
			ch := newRCChan(t, f)
			e := dial(t, ch, uint16(ln.Addr().(*net.TCPAddr).Port), id.QPInitAttr{}, nil, nil)
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			req, _ := readMPA(t, conn)
			if req.P2P != c.p2p || req.WriteRTR != c.w || req.ReadRTR {
				t.Errorf("%s: request %+v", c.name, req)
			}
			_ = conn.Close()
			_ = ln.Close()
			ch.want(t, id.EventRejected)
			_ = e.id.Destroy()
			_ = ch.src.Close()
			quiesceFabs(t, f)
		}
	})
	t.Run("responder", func(t *testing.T) {
		f := soft.New()
		s := newRawServerSide(t, f)
		for _, offer := range []struct{ w, r, wantW, wantR bool }{{true, true, true, false}, {false, true, false, true}, {true, false, true, false}} {
			req := enhancedReq(false)
			req.P2P, req.WriteRTR, req.ReadRTR = true, offer.w, offer.r
			c, rep := s.rawAccept(t, req, false)
			if !rep.P2P || rep.WriteRTR != offer.wantW || rep.ReadRTR != offer.wantR || rep.IRD != 1 || rep.ORD != 1 {
				t.Fatalf("reply %+v to %+v", rep, offer)
			}
			s.ch.none(t, 50*time.Millisecond) // no ESTABLISHED before the RTR
			var rtr []byte
			if rep.WriteRTR {
				rtr = soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: 1}, nil, false)
			} else {
				rtr = soft.FPDU(iwarp.Header{Op: iwarp.OpReadRequest, Last: true, MSN: 1, Read: iwarp.ReadRequest{SinkSTag: 77}}, nil, false)
			}
			_, _ = c.Write(rtr)
			s.ch.want(t, id.EventEstablished)
			if rep.ReadRTR {
				got := make([]byte, 20)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatal(err)
				}
				want := soft.FPDU(iwarp.Header{Op: iwarp.OpReadResponse, Last: true, STag: 77}, nil, false)
				if !bytes.Equal(got, want) {
					t.Fatalf("read response %x, want %x", got, want)
				}
			}
			_ = c.Close()
			s.ch.want(t, id.EventDisconnected)
		}
		s.close(t)
		quiesceFabs(t, f)
	})
	t.Run("responder-disconnects-before-rtr", func(t *testing.T) {
		// An accepted id disconnected while it waits for the initiator's
		// RTR has reported DISCONNECTED; the RTR arriving after that must
		// not report ESTABLISHED (the fuzzer's FuzzSoftRC/5903e67827f819c6
		// saw DISCONNECTED, then ESTABLISHED on the same id).
		f := soft.New()
		s := newRawServerSide(t, f)
		req := enhancedReq(false)
		req.P2P, req.WriteRTR = true, true
		c, rep := s.rawAccept(t, req, false)
		if !rep.P2P || !rep.WriteRTR {
			t.Fatalf("reply %+v", rep)
		}
		if err := s.ids[len(s.ids)-1].Disconnect(); err != nil {
			t.Fatal(err)
		}
		s.ch.want(t, id.EventDisconnected)
		rtr := soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: 1}, nil, false)
		_, _ = c.Write(rtr)
		s.ch.none(t, 200*time.Millisecond)
		// Nor does it answer the RTR (ackRTR): nothing but its close.
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if rest, _ := io.ReadAll(c); bytes.Contains(rest, rtr) {
			t.Fatalf("answered the RTR after DISCONNECTED: %x", rest)
		}
		_ = c.Close()
		s.ch.none(t, 50*time.Millisecond)
		s.close(t)
		quiesceFabs(t, f)
	})
}

// TestRCP2PRTRRepeat: a P2P initiator whose responder stays silent after
// the RTR sends one more zero-length Write (siw's responder may have read
// nothing of the first), and nothing else; the responder's first FPDU is
// then delivered as usual.
func TestRCP2PRTRRepeat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := soft.New()
	ch := newRCChan(t, f)
	buf := make([]byte, 8)
	e := dial(t, ch, uint16(ln.Addr().(*net.TCPAddr).Port), id.QPInitAttr{}, nil, func(tb testing.TB, e *rcEnd) {
		_ = e.qp.PostRecv(&id.RecvWR{WRID: 1, Buf: buf, MR: reg(tb, e, buf, id.AccessLocalWrite)})
	})
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _ := readMPA(t, c)
	if !req.P2P || !req.WriteRTR {
		t.Fatalf("request %+v", req)
	}
	rep := iwarp.MPAFrame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, P2P: true, WriteRTR: true}
	b, _ := iwarp.AppendMPA(nil, &rep)
	_, _ = c.Write(b)
	ch.want(t, id.EventEstablished)
	rtr := soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: 1}, nil, false)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 2*len(rtr))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("the RTR and its repeat: %v (got %x)", err, got)
	}
	if !bytes.Equal(got, append(append([]byte(nil), rtr...), rtr...)) {
		t.Fatalf("got %x, want the Write RTR %x twice", got, rtr)
	}
	_, _ = c.Write(soft.FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, []byte("late"), false))
	wc := comp(t, e.qp.RecvCQ())
	if wc.Status != id.WCSuccess || string(buf[:wc.ByteLen]) != "late" {
		t.Fatalf("%+v %q", wc, buf)
	}
	// The initiator sent nothing else but, had our Send come late, further
	// repeats (at most rtrRepeatMax in all); after our FIN it closes.
	_ = c.(*net.TCPConn).CloseWrite()
	ch.want(t, id.EventDisconnected)
	rest, err := io.ReadAll(c)
	if err != nil || len(rest)%len(rtr) != 0 || len(rest)/len(rtr) > 3 ||
		!bytes.Equal(rest, bytes.Repeat(rtr, len(rest)/len(rtr))) {
		t.Fatalf("after the repeat: %x, %v", rest, err)
	}
	_ = e.id.Destroy()
	_ = ch.src.Close()
	quiesceFabs(t, f)
}

// TestRCResponderHold: an accepted connection does not put FPDUs behind
// its MPA Reply; it sends after the hold delay, or as soon as the
// initiator's first FPDU arrives.
func TestRCResponderHold(t *testing.T) {
	const hold = 300 * time.Millisecond
	f := soft.New(soft.WithResponderHold(hold))
	s := newRawServerSide(t, f)
	for _, initiatorFirst := range []bool{false, true} {
		c, _ := s.rawAccept(t, enhancedReq(false), true)
		srv := s.ids[len(s.ids)-1]
		t0 := time.Now()
		if err := srv.PostSend(1, []byte("first"), nil, id.SendInline); err != nil {
			t.Fatal(err)
		}
		if initiatorFirst {
			_, _ = c.Write(soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: 1}, nil, false))
		}
		got := make([]byte, 32)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		if initiatorFirst && d >= hold {
			t.Errorf("the initiator's FPDU did not end the hold (%v)", d)
		}
		if !initiatorFirst && d < hold*2/3 {
			t.Errorf("first FPDU after %v, hold is %v", d, hold)
		}
		if !bytes.Contains(got, []byte("first")) {
			t.Errorf("FPDU %x", got)
		}
		_ = c.Close()
		s.ch.want(t, id.EventDisconnected)
	}
	s.close(t)
	quiesceFabs(t, f)
}

// TestRCP2PRTRRepeatsAreBounded: toward a responder that never speaks, a
// P2P initiator sends its RTR and four repeats, and then nothing more.
func TestRCP2PRTRRepeatsAreBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := soft.New()
	ch := newRCChan(t, f)
	e := dial(t, ch, uint16(ln.Addr().(*net.TCPAddr).Port), id.QPInitAttr{}, nil, nil)
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if req, _ := readMPA(t, c); !req.P2P || !req.WriteRTR {
		t.Fatalf("request %+v", req)
	}
	rep := iwarp.MPAFrame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, P2P: true, WriteRTR: true}
	b, _ := iwarp.AppendMPA(nil, &rep)
	_, _ = c.Write(b)
	ch.want(t, id.EventEstablished)
	rtr := soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: 1}, nil, false)
	// The repeats end 150 ms after the RTR; a second more shows no sixth.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, bytes.Repeat(rtr, 5)) {
		t.Fatalf("got %x (%d bytes), want the RTR 5 times (%d bytes)", got, len(got), 5*len(rtr))
	}
	_ = e.id.Destroy()
	_ = ch.src.Close()
	quiesceFabs(t, f)
}

// TestRCEstablishedBeforeRTR: a P2P initiator queues ESTABLISHED before it
// writes its RTR (its waiter wakes without waiting for the write), so a
// responder that resets the connection right behind its Reply makes the
// RTR's write fail after ESTABLISHED: the id sees ESTABLISHED, then
// DISCONNECTED, never DISCONNECTED first. The initiator's loop is held
// while the Reply and the reset arrive, so it reads both at once.
func TestRCEstablishedBeforeRTR(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := soft.New(soft.WithP2P(soft.RTRWrite), soft.WithName("rtr-order"))
	ch := newRCChan(t, f)
	e := dial(t, ch, uint16(ln.Addr().(*net.TCPAddr).Port), id.QPInitAttr{}, nil, nil)
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if req, _ := readMPA(t, c); !req.P2P || !req.WriteRTR {
		t.Fatalf("request %+v", req)
	}
	release := soft.HoldLoop(f)
	defer release()
	rep := iwarp.MPAFrame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, P2P: true, WriteRTR: true}
	b, _ := iwarp.AppendMPA(nil, &rep)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).SetLinger(0)
	_ = c.Close() // a reset, behind the Reply
	release()
	ch.want(t, id.EventEstablished)
	ch.want(t, id.EventDisconnected)
	_ = e.id.Destroy()
	_ = ch.src.Close()
	quiesceFabs(t, f)
}

// TestRCP2PResponderAnswersRTR: a Go responder that has nothing to send
// answers the initiator's Write RTR with a zero-length Write of its own, so
// a Go initiator whose peer stays silent repeats no RTR (the repeats are
// for siw's responder: TestRCP2PRTRRepeat), and the answer completes
// nothing on the initiator and takes none of its receives.
func TestRCP2PResponderAnswersRTR(t *testing.T) {
	for _, withQP := range []bool{false, true} {
		name := map[bool]string{false: "no-qp", true: "qp"}[withQP]
		t.Run(name, func(t *testing.T) {
			repeats := soft.CountRTRRepeats(t)
			f := soft.New()
			srvCh, cliCh := newRCChan(t, f), newRCChan(t, f)
			lis := listen(t, srvCh)
			cid, _ := id.Create(cliCh, nil, id.PSTCP)
			_ = cid.ResolveAddr(netip.AddrPort{}, lis.LocalAddr(), time.Second)
			cliCh.want(t, id.EventAddrResolved)
			_ = cid.ResolveRoute(time.Second)
			cliCh.want(t, id.EventRouteResolved)
			attr := id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 2, MaxRecvWR: 2}}
			buf := make([]byte, 8)
			if withQP {
				if err := cid.CreateQP(&attr); err != nil {
					t.Fatal(err)
				}
				m, err := cid.QP().RegMR(buf, id.AccessLocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				if err := cid.QP().PostRecv(&id.RecvWR{WRID: 1, Buf: buf, MR: m}); err != nil {
					t.Fatal(err)
				}
			}
			if err := cid.Connect(nil); err != nil {
				t.Fatal(err)
			}
			sid := srvCh.want(t, id.EventConnectRequest).ID
			if withQP {
				if err := sid.CreateQP(&attr); err != nil {
					t.Fatal(err)
				}
			}
			if err := sid.Accept(nil); err != nil {
				t.Fatal(err)
			}
			cliCh.want(t, id.EventEstablished)
			srvCh.want(t, id.EventEstablished)
			if withQP {
				// The path stays (a QP is attached): wait for the answer.
				waitFor(t, func() bool { return soft.PeerSpoke(cid.Endpoint()) })
				var wc [1]id.WC
				if n := cid.QP().RecvCQ().Poll(wc[:]); n != 0 {
					t.Fatalf("the answer completed %+v", wc[0])
				}
				if n := cid.QP().SendCQ().Poll(wc[:]); n != 0 {
					t.Fatalf("a send completion %+v", wc[0])
				}
			} else {
				// The path is dropped once the start is over: at the
				// answer, or after the last repeat without it.
				waitFor(t, func() bool { return !soft.HasDataPath(cid.Endpoint()) })
			}
			// Without the answer the initiator repeats four times; a
			// responder's loop slower than the first repeat's 10 ms (a
			// loaded machine) may let one or two through.
			if n := repeats(cid.Endpoint()); n >= 4 {
				t.Fatalf("the initiator repeated its RTR %d times toward a Go responder", n)
			}
			if withQP {
				// The receive posted before the answer takes the first Send.
				if err := sid.PostSend(2, []byte("hi"), nil, id.SendInline|id.SendSignaled); err != nil {
					t.Fatal(err)
				}
				wantWC(t, comp(t, sid.QP().SendCQ()), id.WCSuccess, id.WCSend)
				wc := comp(t, cid.QP().RecvCQ())
				if wc.WRID != 1 || wc.Status != id.WCSuccess || string(buf[:wc.ByteLen]) != "hi" {
					t.Fatalf("%+v %q", wc, buf[:wc.ByteLen])
				}
			}
			_ = cid.Disconnect()
			cliCh.want(t, id.EventDisconnected)
			srvCh.want(t, id.EventDisconnected)
			for _, i := range []*id.ID{cid, sid, lis} {
				_ = i.Destroy()
			}
			_ = srvCh.src.Close()
			_ = cliCh.src.Close()
			quiesceFabs(t, f)
		})
	}
}

// TestRCP2PResponderAnswerWire: what a Go responder writes after a raw
// initiator's Write RTR: one zero-length Write (the RTR's own bytes) when
// it has nothing to send, nothing but its message when one was posted
// while it waited for the RTR, and nothing for a Read RTR beyond the Read
// Response (TestRCP2PWire).
func TestRCP2PResponderAnswerWire(t *testing.T) {
	f := soft.New()
	s := newRawServerSide(t, f)
	rtr := soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: 1}, nil, false)
	for _, posted := range []bool{false, true} {
		req := enhancedReq(false)
		req.P2P, req.WriteRTR = true, true
		c, rep := s.rawAccept(t, req, false)
		if !rep.P2P || !rep.WriteRTR {
			t.Fatalf("reply %+v", rep)
		}
		srv := s.ids[len(s.ids)-1]
		want := rtr
		if posted {
			if err := srv.PostSend(1, []byte("first"), nil, id.SendInline); err != nil {
				t.Fatal(err)
			}
			want = soft.FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, []byte("first"), false)
		}
		_, _ = c.Write(rtr)
		s.ch.want(t, id.EventEstablished)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("posted=%v: %v (got %x)", posted, err, got)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("posted=%v: got %x, want %x", posted, got, want)
		}
		// Our FIN: the responder closes, with nothing more written.
		_ = c.(*net.TCPConn).CloseWrite()
		s.ch.want(t, id.EventDisconnected)
		if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
			t.Fatalf("posted=%v: then %x, %v", posted, rest, err)
		}
		_ = c.Close()
	}
	s.close(t)
	quiesceFabs(t, f)
}
