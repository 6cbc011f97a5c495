package rsocket

import (
	"fmt"
	"os"
	"syscall"

	"github.com/cmrt/cmrt/id"
)

// ioMapping is a buffer of ours the peer may write into directly.
type ioMapping struct {
	buf    []byte
	mr     id.MR
	offset int64
}

// IOMap offers buf to the peer for direct writes, as riomap with
// PROT_WRITE: the peer's IOWrite (riowrite) at offsets [offset,
// offset+len(buf)) lands in buf with no message and no copy on this side,
// so buf must be watched for the data (rsockets' riostream polls its last
// byte). The peer must accept mappings (WithIOMapSize on this side's
// peer; RDMA_IOMAPSIZE in C); ENOMEM when all its entries are in use.
// The descriptor goes out at once, ahead of later writes. buf belongs to
// the connection until IOUnmap.
func (c *Conn) IOMap(buf []byte, offset int64) (int64, error) {
	if len(buf) == 0 || offset < 0 {
		return 0, c.opErr("iomap", syscall.EINVAL)
	}
	c.wlock.Lock()
	defer c.wlock.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	k := -1
	for j, m := range c.lmaps {
		if m == nil {
			k = j
			break
		}
	}
	if k < 0 {
		return 0, c.opErr("iomap", fmt.Errorf("rsocket: the peer accepts %d mappings: %w", len(c.lmaps), syscall.ENOMEM))
	}
	for !c.canSend(iomapLen) {
		if err := c.writeErr(); err != nil {
			return 0, c.opErr("iomap", err)
		}
		c.mu.Unlock()
		err := c.block(&c.wwait, spinIOMap, c.wwake, &c.wdl)
		c.mu.Lock()
		if err != nil {
			return 0, c.opErr("iomap", err)
		}
	}
	if err := c.writeErr(); err != nil {
		return 0, c.opErr("iomap", err)
	}
	mr, err := c.cm.RegWrite(buf)
	if err != nil {
		return 0, c.opErr("iomap", err)
	}
	m := &ioMapping{buf: buf, mr: mr, offset: offset}
	e := iomap{Offset: uint64(offset), SGE: sge{Addr: mr.Addr(), Key: mr.RKey(), Len: uint32(len(buf))}}
	b := appendIOMap(c.scratch[:0], c.order, e)
	n := c.msgWRs()
	err = c.postWriteMsg(sendID(kIOMap, uint64(n), 0), b, nil, id.SendInline,
		c.remIOMap.Addr+uint64(k)*iomapLen, c.remIOMap.Key, msgWord(opIOMapSGL, uint32(k)), false)
	if err != nil {
		_ = c.cm.DeregMR(mr)
		c.down(fmt.Errorf("rsocket: post iomap: %w", err))
		return 0, c.opErr("iomap", err)
	}
	c.sseqNo++ // rsockets counts the entry against the credits
	c.sqeAvail -= n
	c.lmaps[k] = m
	return offset, nil
}

// IOUnmap withdraws a mapping made by IOMap, as riounmap: buf must be the
// slice given to IOMap. The peer is not told (rsockets does not tell it
// either); its later direct writes fail the connection.
func (c *Conn) IOUnmap(buf []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, m := range c.lmaps {
		if m != nil && len(m.buf) == len(buf) && len(buf) > 0 && &m.buf[0] == &buf[0] {
			c.lmaps[k] = nil
			if err := c.cm.DeregMR(m.mr); err != nil {
				return c.opErr("iounmap", err)
			}
			return nil
		}
	}
	return c.opErr("iounmap", syscall.EINVAL)
}

// IOWrite writes b directly into the peer's mapping of offset (made by the
// peer's IOMap or riomap), as riowrite: RDMA Writes with no message, so the
// peer learns of the data only by looking at its buffer. It returns the
// bytes written, fewer than len(b) where the peer's mapping ends (0 and
// EINVAL when offset is in no mapping of the peer's).
func (c *Conn) IOWrite(b []byte, offset int64) (int, error) {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	if expired(&c.wdl) {
		return 0, c.opErr("iowrite", os.ErrDeadlineExceeded)
	}
	n, olen := 0, firstXfer
	c.mu.Lock()
	defer c.mu.Unlock()
	for n < len(b) {
		if err := c.writeErr(); err != nil {
			return n, c.opErr("iowrite", err)
		}
		off := uint64(offset) + uint64(n)
		var m *iomap
		for j := range c.iomaps {
			e := &c.iomaps[j]
			if e.SGE.Len > 0 && off >= e.Offset && off < e.Offset+uint64(e.SGE.Len) {
				m = e
				break
			}
		}
		if m == nil {
			if n == 0 {
				return 0, c.opErr("iowrite", syscall.EINVAL)
			}
			return n, nil
		}
		left := len(b) - n
		if c.sqeAvail < 1 || (left > c.cfg.inline && !c.sbufFits(left)) {
			c.ioLeft = left
			c.mu.Unlock()
			err := c.block(&c.wwait, spinIOWrite, c.wwake, &c.wdl)
			c.mu.Lock()
			if err != nil {
				return n, c.opErr("iowrite", err)
			}
			continue
		}
		x := left
		if olen < left {
			x = olen
			olen = min(2*olen, maxXfer)
		}
		x = min(x, int(m.Offset+uint64(m.SGE.Len)-off))
		p := b[n : n+x]
		buf, mr, flags, rel := p, id.MR(nil), id.SendInline|id.SendSignaled, 0
		if len(p) > c.cfg.inline {
			o, space, skip := c.sbufChunk()
			p = p[:min(len(p), space)]
			buf, mr, flags = c.sbuf[o:o+len(p)], c.smr, id.SendSignaled
			copy(buf, p)
			rel = len(p) + skip
			c.sUsed += rel
			c.sPos = o + len(p)
		}
		if err := c.cm.PostWrite(sendID(kDirect, 1, rel), buf, mr, flags, m.SGE.Addr+off-m.Offset, m.SGE.Key); err != nil {
			c.down(fmt.Errorf("rsocket: post direct write: %w", err))
			return n, c.opErr("iowrite", err)
		}
		c.sqeAvail--
		n += len(buf)
	}
	return n, nil
}

// sbufFits reports whether the send buffer has room to stage part of a
// transfer of left bytes. Called with mu held.
func (c *Conn) sbufFits(left int) bool {
	_, space, _ := c.sbufChunk()
	return space >= min(left, sndLowat)
}
