package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// target is a real TCP server on 127.0.0.1 handing its accepted connections
// to the test.
type target struct {
	ln    net.Listener
	conns chan net.Conn
}

func newTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln, conns: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(tg.conns)
		for c := range tg.conns {
			c.Close()
		}
	})
	return tg
}

// accept returns the next connection the target accepted.
func (tg *target) accept(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-tg.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the target accepted no connection")
		return nil
	}
}

// setup starts a target and a proxy to it and connects a client through it.
func setup(t *testing.T) (*Proxy, *target, net.Conn, net.Conn) {
	t.Helper()
	tg := newTarget(t)
	p, err := New(context.Background(), tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cl := dial(t, p)
	return p, tg, cl, tg.accept(t)
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// expect reads exactly want from c.
func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading %q: %v (got %q)", want, err, got)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// nothing checks that no byte arrives on c within a short window: a held
// byte must not leak (a late one would be caught by the next expect).
func nothing(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	n, err := c.Read(b[:])
	if n > 0 {
		t.Fatalf("byte %q arrived while it should be held", b[:n])
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want a timeout", err)
	}
}

func TestForward(t *testing.T) {
	p, _, cl, sv := setup(t)
	send(t, cl, "hello")
	expect(t, sv, "hello")
	send(t, sv, "world")
	expect(t, cl, "world")
	// A half close travels as a half close.
	cl.(*net.TCPConn).CloseWrite()
	sv.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := sv.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the client's half close the server reads %d, %v", n, err)
	}
	send(t, sv, "still")
	expect(t, cl, "still")
	if p.Accepted() != 1 {
		t.Fatalf("accepted %d connections", p.Accepted())
	}
}

func TestDelay(t *testing.T) {
	p, _, cl, sv := setup(t)
	p.Delay(ClientToServer, time.Hour)
	send(t, cl, "slow")
	nothing(t, sv)
	send(t, sv, "other way") // the other direction is not delayed
	expect(t, cl, "other way")
	p.Delay(ClientToServer, 0)
	expect(t, sv, "slow")

	const d = 200 * time.Millisecond
	p.Delay(ServerToClient, d)
	start := time.Now()
	send(t, sv, "abc")
	send(t, sv, "def")
	expect(t, cl, "abcdef")
	if el := time.Since(start); el < d {
		t.Fatalf("delayed bytes arrived after %v, before the delay %v", el, d)
	}
}

func TestDrop(t *testing.T) {
	p, _, cl, sv := setup(t)
	send(t, cl, "a")
	expect(t, sv, "a")
	p.Drop(ClientToServer)
	send(t, cl, "lost")
	for p.Dropped(ClientToServer) < 4 {
		time.Sleep(5 * time.Millisecond)
	}
	send(t, sv, "back") // the other direction still flows
	expect(t, cl, "back")
	p.Restore(ClientToServer)
	send(t, cl, "c")
	expect(t, sv, "c")
}

func TestStall(t *testing.T) {
	p, _, cl, sv := setup(t)
	p.Stall(ServerToClient)
	send(t, sv, "held1")
	send(t, sv, "held2")
	nothing(t, cl)
	send(t, cl, "up") // the other direction still flows
	expect(t, sv, "up")
	p.Restore(ServerToClient)
	expect(t, cl, "held1held2")
}

func TestReset(t *testing.T) {
	p, tg, cl, sv := setup(t)
	send(t, cl, "x")
	expect(t, sv, "x")
	cl2 := dial(t, p)
	sv2 := tg.accept(t)
	if n := p.Reset(); n != 2 {
		t.Fatalf("reset %d connections, want 2", n)
	}
	for _, c := range []net.Conn{cl, sv, cl2, sv2} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after reset: %v, want ECONNRESET", err)
		}
	}
	// New connections work.
	cl3 := dial(t, p)
	sv3 := tg.accept(t)
	send(t, cl3, "new")
	expect(t, sv3, "new")
}

func TestPartitionUntilHeal(t *testing.T) {
	p, tg, cl, sv := setup(t)
	p.Partition(0)
	send(t, cl, "to server")
	send(t, sv, "to client")
	nothing(t, sv)
	nothing(t, cl)
	// A connection made during the partition does not reach the target.
	cl2 := dial(t, p)
	send(t, cl2, "late")
	select {
	case c := <-tg.conns:
		c.Close()
		t.Fatal("a connection reached the target during the partition")
	case <-time.After(300 * time.Millisecond):
	}
	if !p.Partitioned() {
		t.Fatal("not partitioned")
	}
	p.Heal()
	expect(t, sv, "to server")
	expect(t, cl, "to client")
	sv2 := tg.accept(t)
	expect(t, sv2, "late")
}

func TestPartitionForDuration(t *testing.T) {
	p, _, cl, sv := setup(t)
	const d = 500 * time.Millisecond
	end := time.Now().Add(d)
	p.Partition(d)
	send(t, cl, "held")
	expect(t, sv, "held") // delivered without a Heal, once the partition ends
	if time.Now().Before(end) {
		t.Fatal("bytes crossed the partition before it ended")
	}
	if p.Partitioned() {
		t.Fatal("still partitioned after its duration")
	}
}

func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	tg := newTarget(t)
	p, err := New(context.Background(), tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cl := dial(t, p)
	sv := tg.accept(t)
	p.Stall(ClientToServer)
	send(t, cl, "held")
	cl2 := dial(t, p) // still waiting for the partition below to heal
	_ = sv
	p.Partition(0)
	cl3 := dial(t, p)
	p.Close()
	for _, c := range []net.Conn{cl, cl2, cl3} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a client connection is still open after Close: %v", err)
		}
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("the proxy still accepts after Close")
	}
	// Every goroutine of the proxy is gone (the target's accept loop is
	// this test's and was running before... it is started after before, so
	// allow for it).
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+1 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
