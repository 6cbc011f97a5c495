package channel_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefaultFabricIsSoftAndEnvSelects(t *testing.T) {
	ch, err := channel.New()
	if err != nil {
		t.Fatal(err)
	}
	if ch.Fabric().Name() != "soft" {
		t.Fatalf("default fabric %s", ch.Fabric().Name())
	}
	_ = ch.Close()
	t.Setenv(fabric.Env, "no-such-fabric")
	if _, err := channel.New(); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("unknown fabric: %v", err)
	}
}

func TestGetEventWaitsNonblocksAndCloses(t *testing.T) {
	f := fakefab.New("fake", false)
	ch, err := channel.New(channel.WithFabric(f), channel.WithNonblocking())
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Nonblocking() {
		t.Fatal("WithNonblocking ignored")
	}
	if _, err := ch.GetEvent(); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("nonblocking empty GetEvent = %v", err)
	}
	ch.SetNonblocking(false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ch.GetEventContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetEventContext = %v", err)
	}
	cm, _ := id.Create(ch, nil, id.PSTCP)
	cm.Endpoint().(*fakefab.Endpoint).Inject(id.EventUser, 0, nil)
	// The descriptor is readable while an event is queued.
	fds := []unix.PollFd{{Fd: int32(ch.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 1000)
	for err == unix.EINTR { // a signal (the runtime's preemption) is not an answer
		n, err = unix.Poll(fds, 1000)
	}
	if n != 1 {
		t.Fatal("channel fd not readable with an event queued")
	}
	ev, err := ch.GetEvent()
	if err != nil || ev.Type != id.EventUser {
		t.Fatalf("GetEvent = %v %v", ev, err)
	}
	_ = ch.Ack(ev)
	if err := ch.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("Close with an id = %v", err)
	}
	_ = cm.Destroy()
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := ch.GetEvent(); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("GetEvent after Close = %v", err)
	}
	if _, err := id.Create(ch, nil, id.PSTCP); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Create on a closed channel = %v", err)
	}
}
