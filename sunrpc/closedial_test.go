package sunrpc

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenBacklog0 listens on 127.0.0.1 with a backlog of 0: one connection
// waits in the accept queue, and the SYN of the next is dropped (Linux
// retransmits it after a second), so its connect(2) blocks until the test
// accepts the first. Real sockets make the dial that is slow.
func listenBacklog0(t *testing.T) net.Listener {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "backlog0")
	defer f.Close() // FileListener dups it
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestCloseDuringDial: a Client closed while a reconnection's connect(2) is
// still under way runs no connect hook and serves no connection after Close
// returned. Before, the dial counted its connection's goroutine in the wait
// group Close had already waited on, and ran the hook (in snfs, the
// REGISTER of a session that had unregistered) on a closed client.
func TestCloseDuringDial(t *testing.T) {
	ln := listenBacklog0(t)
	var closeReturned, lateHook atomic.Bool
	var hooks atomic.Int32
	hook := func(ctx context.Context, c *Conn) error {
		hooks.Add(1)
		if closeReturned.Load() {
			lateHook.Store(true)
		}
		return nil
	}
	accepted := make(chan net.Conn, 4)
	acceptOne := func() {
		go func() {
			if nc, err := ln.Accept(); err == nil {
				accepted <- nc
			}
		}()
	}
	acceptOne()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, "tcp", ln.Addr().String(), testProg, 1, WithOnConnect(hook))
	if err != nil {
		t.Fatal(err)
	}
	first := <-accepted
	defer first.Close()

	// The server side goes: the client forgets its connection.
	first.Close()
	for {
		c.mu.Lock()
		cur := c.cur
		c.mu.Unlock()
		if cur == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the client kept its broken connection")
		}
		time.Sleep(time.Millisecond)
	}
	// A connection nobody accepts fills the queue: the redial blocks.
	filler, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	callErr := make(chan error, 1)
	go func() { callErr <- c.Call(ctx, 0, nil, nil) }()
	for {
		c.mu.Lock()
		dialing := c.dialing != nil
		c.mu.Unlock()
		if dialing {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the call did not redial")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // into connect(2)
	c.Close()
	closeReturned.Store(true)

	// Room in the queue: the dial completes at its SYN's retransmission.
	acceptOne() // the filler
	acceptOne() // the redial's connection
	select {
	case err := <-callErr:
		if !errors.Is(err, ErrClientClosed) {
			t.Errorf("call on a client closed meanwhile: %v, want ErrClientClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("the call never ended")
	}
	if lateHook.Load() {
		t.Errorf("the connect hook ran after Close returned (%d hooks)", hooks.Load())
	}
	if n := hooks.Load(); n != 1 {
		t.Errorf("connect hook ran %d times, want 1 (the first connection's)", n)
	}
	for len(accepted) > 0 {
		(<-accepted).Close()
	}
}
