package rsocket

import (
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
)

// TestMessageOneWrite checks that on the software fabric (iWARP: each
// message is an RDMA Write and the 4-byte Send of its message word) a
// message leaves with one write(2) on the fabric's socket, not one per
// work request: postWriteMsg posts the two as one list. It counts the
// fabric's writes against its RDMAP messages over a ping-pong of 64-byte
// messages, where nothing else is queued when a message is posted (each
// side waits for the other's): a message written with a write(2) per
// work request makes as many writes as messages. Credit updates sent
// alone (one Send) are one write of one message, which the bound leaves
// room for. No test of the package runs in parallel, so the deltas are
// this test's.
func TestMessageOneWrite(t *testing.T) {
	c1, c2, stop := pipe(t)
	defer stop()
	if !c1.msgSend || !c2.msgSend {
		t.Fatal("message words do not go as Sends on the software fabric")
	}
	c1.SetDeadline(time.Now().Add(20 * time.Second))
	c2.SetDeadline(time.Now().Add(20 * time.Second))
	pingPong(t, c1, c2, 4, 64) // the set-up's credits are out of the way
	const rounds = 200
	before := soft.Traffic()
	pingPong(t, c1, c2, rounds, 64)
	after := soft.Traffic()
	writes, msgs := after.SentWrites-before.SentWrites, after.SentMessages-before.SentMessages
	t.Logf("%d messages each way: %d RDMAP messages in %d write(2)s", rounds, msgs, writes)
	if msgs < 4*rounds {
		t.Fatalf("%d RDMAP messages for %d rsocket messages, want at least 2 each", msgs, 2*rounds)
	}
	if writes*10 > msgs*6 {
		t.Fatalf("%d RDMAP messages took %d write(2)s, want about one per rsocket message (2 RDMAP messages)", msgs, writes)
	}
}
