package diffkernel

import (
	"os"
	"strconv"
	"testing"

	"github.com/cmrt/cmrt/internal/callseq"
)

// TestSoftAgainstItself runs generated sequences (without their probes)
// with the software fabric on both sides: the comparison must find nothing
// (a divergence here is the driver's or the comparison's fault, or
// nondeterminism in the fabric), and each side's journal must satisfy the
// model.
func TestSoftAgainstItself(t *testing.T) {
	if !inVMNetns(t, "TestSoftAgainstItself") {
		return
	}
	n := 12
	if v, err := strconv.Atoi(os.Getenv("CMRT_DIFFKERNEL_SELF_N")); err == nil {
		n = v
	}
	for _, d := range Devices {
		a, b := softFabric(d, "a-"+d.Netdev), softFabric(d, "b-"+d.Netdev)
		dd := d
		dd.Mode = callseq.ModeIWARP // the software fabric on both sides: iWARP semantics
		r := NewRunner(Config{Device: dd, Soft: a, Kernel: b})
		for k := 0; k < n; k++ {
			for _, mode := range []callseq.Mode{callseq.ModeIWARP, callseq.ModeIB} {
				seq := callseq.Generate(callseq.NewRand(1, uint64(k)), callseq.Config{Mode: mode})
				if n := len(seq); n > 0 && seq[n-1].Probe {
					// A probe asks the fabric past the library's checks:
					// the software fabric relies on them.
					seq = seq[:n-1]
				}
				res, err := r.Run(k, seq)
				if err != nil {
					t.Fatal(err)
				}
				if res.Div != nil {
					t.Errorf("%s, sequence %d: %s\nsoft A:\n%skernel side (soft B):\n%s", d.Name, k, res.Div, res.Soft, res.Kernel)
				}
			}
		}
	}
}
