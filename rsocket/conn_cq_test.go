package rsocket

import (
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
)

// TestWriteOneSyscall checks that on the software fabric (iWARP: each
// message is an RDMA Write and the 4-byte Send of its message word) a
// Write leaves with one write(2) on the fabric's socket, not one per work
// request: postWriteMsg posts a message's two as one list, and a Write
// cut into several messages (rsockets makes a 4 KiB Write two messages of
// 2 KiB) posts them as one list too. It counts the fabric's writes over a
// ping-pong, where nothing else is queued when a Write posts (each side
// waits for the other's): posted a work request at a time, a 64-byte
// Write took two writes (its two RDMAP messages) and a 4 KiB one four.
// Credit updates (one write each, now and then) are what the bound
// leaves room for. No test of the package runs in parallel, so the
// deltas are this test's.
func TestWriteOneSyscall(t *testing.T) {
	for _, tc := range []struct {
		size     int
		messages uint64 // rsocket messages per Write
	}{
		{64, 1},
		{4096, 2},
	} {
		t.Run(sizeName(tc.size), func(t *testing.T) {
			c1, c2, stop := pipe(t)
			defer stop()
			if !c1.msgSend || !c2.msgSend {
				t.Fatal("message words do not go as Sends on the software fabric")
			}
			c1.SetDeadline(time.Now().Add(20 * time.Second))
			c2.SetDeadline(time.Now().Add(20 * time.Second))
			pingPong(t, c1, c2, 4, tc.size) // the set-up's credits are out of the way
			const rounds = 200
			before := soft.Traffic()
			pingPong(t, c1, c2, rounds, tc.size)
			after := soft.Traffic()
			writes, msgs := after.SentWrites-before.SentWrites, after.SentMessages-before.SentMessages
			t.Logf("%d Writes of %d bytes: %d RDMAP messages in %d write(2)s", 2*rounds, tc.size, msgs, writes)
			if msgs < 2*rounds*2*tc.messages {
				t.Fatalf("%d RDMAP messages for %d Writes, want at least %d each", msgs, 2*rounds, 2*tc.messages)
			}
			if writes*4 > 2*rounds*5 {
				t.Fatalf("%d Writes took %d write(2)s, want about one each", 2*rounds, writes)
			}
		})
	}
}
