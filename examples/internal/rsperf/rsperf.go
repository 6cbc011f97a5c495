// Package rsperf holds what rdma-core's rsocket benchmarks (rstream,
// riostream) share through their common.c: the test sizes, the size and
// count formats of their table, the counts per size, and the data pattern
// they write and verify.
package rsperf

import (
	"fmt"
	"io"
	"time"
)

// Size is one test size; Option 1 sizes run only with "-S all".
type Size struct {
	Bytes  int
	Option int
}

// Sizes are the test sizes of rstream and riostream, 64 B to 6 MiB.
var Sizes = []Size{
	{1 << 6, 0},
	{1 << 7, 1}, {1<<7 + 1<<6, 1},
	{1 << 8, 1}, {1<<8 + 1<<7, 1},
	{1 << 9, 1}, {1<<9 + 1<<8, 1},
	{1 << 10, 1}, {1<<10 + 1<<9, 1},
	{1 << 11, 1}, {1<<11 + 1<<10, 1},
	{1 << 12, 0}, {1<<12 + 1<<11, 1},
	{1 << 13, 1}, {1<<13 + 1<<12, 1},
	{1 << 14, 1}, {1<<14 + 1<<13, 1},
	{1 << 15, 1}, {1<<15 + 1<<14, 1},
	{1 << 16, 0}, {1<<16 + 1<<15, 1},
	{1 << 17, 1}, {1<<17 + 1<<16, 1},
	{1 << 18, 1}, {1<<18 + 1<<17, 1},
	{1 << 19, 1}, {1<<19 + 1<<18, 1},
	{1 << 20, 0}, {1<<20 + 1<<19, 1},
	{1 << 21, 1}, {1<<21 + 1<<20, 1},
	{1 << 22, 1}, {1<<22 + 1<<21, 1},
}

// SizeStr formats a byte count as common.c's size_str: "64", "1.5k",
// "4k", "1m".
func SizeStr(size int64) string {
	var base int64 = 1
	mag := ""
	switch {
	case size >= 1<<30:
		base, mag = 1<<30, "g"
	case size >= 1<<20:
		base, mag = 1<<20, "m"
	case size >= 1<<10:
		base, mag = 1<<10, "k"
	}
	var fraction int64
	if size/base < 10 {
		fraction = (size % base) * 10 / base
	}
	if fraction != 0 {
		return fmt.Sprintf("%d.%d%s", size/base, fraction, mag)
	}
	return fmt.Sprintf("%d%s", size/base, mag)
}

// CntStr formats a count as common.c's cnt_str: "100", "10k", "1m".
func CntStr(cnt int64) string {
	switch {
	case cnt >= 1000000000:
		return fmt.Sprintf("%db", cnt/1000000000)
	case cnt >= 1000000:
		return fmt.Sprintf("%dm", cnt/1000000)
	case cnt >= 1000:
		return fmt.Sprintf("%dk", cnt/1000)
	}
	return fmt.Sprintf("%d", cnt)
}

// SizeToCount is common.c's size_to_count: how many transfers a test of
// this size makes.
func SizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// Header prints the table header.
func Header(w io.Writer) {
	fmt.Fprintf(w, "%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n",
		"name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
}

// Perf prints one result line as show_perf does: iterations of count
// transfers of size bytes each way took d.
func Perf(w io.Writer, name string, size, count, iterations int, d time.Duration) {
	usec := float32(d.Microseconds())
	bytes := int64(iterations) * int64(count) * int64(size) * 2
	fmt.Fprintf(w, "%-10s", name)
	fmt.Fprintf(w, "%-8s", SizeStr(int64(size)))
	fmt.Fprintf(w, "%-8s", CntStr(int64(count)))
	fmt.Fprintf(w, "%-8s", CntStr(int64(iterations)))
	fmt.Fprintf(w, "%-8s", SizeStr(bytes))
	fmt.Fprintf(w, "%8.2fs%10.2f%11.2f\n", usec/1000000., float32(bytes*8)/(1000.*usec),
		(usec/float32(iterations))/float32(count*2))
}

// Pattern writes and checks common.c's data: a byte counter that runs on
// across buffers, one for what is written and one for what is checked.
type Pattern struct {
	fmt, ver byte
	total    int64
}

// Format fills b with the next bytes of the pattern (format_buf).
func (p *Pattern) Format(b []byte) {
	for k := range b {
		b[k] = p.fmt
		p.fmt++
	}
}

// Verify checks b against the pattern (verify_buf), printing
// "data verification failed byte N" to w at the first difference.
func (p *Pattern) Verify(w io.Writer, b []byte) error {
	for k := range b {
		if b[k] != p.ver {
			fmt.Fprintf(w, "data verification failed byte %d\n", p.total)
			return fmt.Errorf("data verification failed byte %d", p.total)
		}
		p.ver++
		p.total++
	}
	return nil
}

// LatName and BwName are the test names of a size: "64_lat", "1m_bw".
func LatName(size int) string { return SizeStr(int64(size)) + "_lat" }

// BwName is the bandwidth test name of a size.
func BwName(size int) string { return SizeStr(int64(size)) + "_bw" }
