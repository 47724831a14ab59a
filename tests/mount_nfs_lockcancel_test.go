package tests

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/mount/vfs"
)

// replyGate is a TCP relay to the server whose replies (server to client)
// can be held back: a request reaches the server, its answer waits.
type replyGate struct {
	ln   net.Listener
	hold sync.RWMutex // write-locked while replies are held
}

func newReplyGate(t *testing.T, to string) *replyGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &replyGate{ln: ln}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() {
				defer wg.Done()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						g.hold.RLock() // waits while replies are held
						_, werr := c.Write(buf[:n])
						g.hold.RUnlock()
						if werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return g
}

func (g *replyGate) addr() string { return g.ln.Addr().String() }

// TestMountNFSLockWaitKilledBeforeBlocked: a waiter killed after the server
// queued its blocking LOCK but before the BLOCKED reply reached the mount
// leaves no waiting request at the server: the mount sends CANCEL for a LOCK
// it gave up, answered or not.
func TestMountNFSLockWaitKilledBeforeBlocked(t *testing.T) {
	t.Parallel()
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	a := newNLMMount(t, e, h, false, time.Hour)
	g := newReplyGate(t, e.addr)
	bg := newNLMMountCfgAddr(t, e, vfs.NLMConfig{CallerName: "gated-b", Poll: time.Hour}, g.addr())
	fa := openRW(t, a.path("db"))
	openRW(t, bg.path("db")).Close()
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	g.hold.Lock()
	held := true
	release := func() {
		if held {
			held = false
			g.hold.Unlock()
		}
	}
	defer release()
	w := startLockChild(t, bg.path("db"))
	w.expect(t, "waiting")
	waitWaiters(t, e, 1) // queued at the server; its BLOCKED reply is held
	killed := make(chan struct{})
	go func() { defer close(killed); w.kill() }()
	defer func() { release(); <-killed }() // before the child's cleanup kills it again
	waitWaiters(t, e, 0)
	release()
	<-killed
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("a local lock after A's unlock: %v (the killed waiter holds it?)", err)
	}
}

// newNLMMountCfgAddr is newNLMMountCfg with the NLM calls sent to addr.
func newNLMMountCfgAddr(t *testing.T, e *env, cfg vfs.NLMConfig, addr string) *mount {
	t.Helper()
	cfg.Addr, cfg.CallbackAddr = addr, "127.0.0.1:0"
	m := newMountConfig(t, e, vfs.Config{NLM: &cfg})
	t.Cleanup(func() { m.v.Close() })
	return m
}
