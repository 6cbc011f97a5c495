package journalsvg

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// FuzzDraw draws journals made of any records journal.ReadJSON can return: it
// must not panic, and every page must be well-formed SVG.
func FuzzDraw(f *testing.F) {
	f.Add([]byte{3, 40, 1, 0, 0, 0, 0, 0, 1, 0, 1, 2, 0, 0, 1, 1, 0, 9, 0, 11, 1, 0})
	f.Add(bytes.Repeat([]byte{2, 1, 0, 5, 0, 0, 7, 1, 1, 0, 9, 0, 11, 1}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		minRun, maxRows := int(b[0]%5), int(b[1]%60)+1
		var recs []journal.Record
		seq := uint64(0)
		for k := 2; k+6 <= len(b); k += 6 {
			c := b[k : k+6]
			if c[0]&0x80 == 0 {
				seq++ // else a repeated sequence number
			}
			r := journal.Record{Seq: seq, Time: int64(seq)*1000 - int64(c[5]), ID: uint64(c[0]%8) + 1,
				Channel: uint64(c[1]%4) + 1, Parent: uint64(c[1] >> 5), Kind: journal.RecordKind(c[2] % 3),
				QPType: id.RC, Status: int32(int8(c[4])), State: id.State(c[3] % 17)}
			if c[2]&0x80 != 0 {
				r.QPType = id.UD
			}
			switch r.Kind {
			case journal.KindCall:
				r.Call = journal.Call(c[5] % 17)
			case journal.KindEvent:
				r.Event = id.EventType(int(c[5]%21) - 1)
			}
			recs = append(recs, r)
		}
		for page := 1; page <= 3; page++ {
			var buf bytes.Buffer
			info, err := Draw(&buf, recs, WithCollapse(minRun), WithMaxRows(maxRows), WithPage(page))
			if errors.Is(err, ErrNoPage) && page > 1 {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.Records != len(recs) || info.Violations > len(recs) {
				t.Fatalf("info %+v for %d records", info, len(recs))
			}
			wellFormed(t, buf.Bytes())
		}
	})
}
