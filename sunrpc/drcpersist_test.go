package sunrpc

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"snfs/xdr"
)

// memStore is a ReplyStore in memory whose Save can be held (gate): the
// contract's side that tests need to see, when a reply waits for its save.
type memStore struct {
	mu    sync.Mutex
	saved []SavedReply
	saves int           // Save calls
	held  int           // replies in the Save waiting at the gate
	gate  chan struct{} // if not nil, each Save waits for a value
}

func (m *memStore) Load(f func(SavedReply)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.saved {
		f(r)
	}
	return nil
}

func (m *memStore) Save(rs []SavedReply) error {
	if m.gate != nil {
		m.mu.Lock()
		m.held = len(rs)
		m.mu.Unlock()
		<-m.gate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = 0
	m.saves++
	m.saved = append(m.saved, rs...)
	return nil
}

func (m *memStore) counts() (saves, saved int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves, len(m.saved)
}

// persistServer serves testProg version 3 whose procedure 1, COUNT, is
// Persist (proc 2 is COUNT too, with SaveLater), with a DRC saving into st.
func persistServer(t *testing.T, st ReplyStore, maxAge time.Duration, counter *atomic.Int64) (*Server, *DRC, string) {
	t.Helper()
	count := func(later bool) Handler {
		return func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			a.Uint32()
			c.SaveLater = later
			w.Uint32(uint32(counter.Add(1)))
			return nil
		}
	}
	drc := NewDRC(100, 1<<20)
	if err := drc.Persist(st, maxAge); err != nil {
		t.Fatal(err)
	}
	s := &Server{DRC: drc}
	s.Register(&Program{Name: "test", Number: testProg, Versions: map[uint32][]Proc{3: {
		{Name: "NULL", Handler: func(context.Context, *Call, *xdr.Reader, *xdr.Writer) error { return nil }},
		{Name: "COUNT", Cache: true, Persist: true, Handler: count(false)},
		{Name: "COUNT_LATER", Cache: true, Persist: true, Handler: count(true)},
		// INTENT saves an intent before it counts; its reply adds 1000 if
		// the call came with the intent "resolved".
		{Name: "INTENT", Cache: true, Persist: true, Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			a.Uint32()
			v := uint32(0)
			if string(c.Intent) == "resolved" {
				v = 1000
			}
			if err := c.SaveIntent([]byte("pending")); err != nil {
				return err
			}
			w.Uint32(v + uint32(counter.Add(1)))
			return nil
		}},
	}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeTCP(ln)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		drc.Close()
	}
	t.Cleanup(stop)
	return s, drc, ln.Addr().String()
}

// TestDRCPersistBeforeReply: the reply of a Persist procedure is sent only once
// its save returned; one marked SaveLater goes at once.
func TestDRCPersistBeforeReply(t *testing.T) {
	st := &memStore{gate: make(chan struct{})}
	var counter atomic.Int64
	_, _, addr := persistServer(t, st, 0, &counter)
	c := dial(t, "tcp", addr, 3)
	ctx := context.Background()
	got := make(chan error, 1)
	var res u32res
	go func() { got <- c.Call(ctx, 1, u32(0), &res) }()
	select {
	case err := <-got:
		t.Fatalf("reply (%v) before its save returned", err)
	case <-time.After(200 * time.Millisecond):
	}
	st.gate <- struct{}{}
	if err := <-got; err != nil || res.v != 1 {
		t.Fatalf("reply after the save: %v %d", err, res.v)
	}
	if _, saved := st.counts(); saved != 1 {
		t.Fatalf("%d replies saved", saved)
	}
	// SaveLater: answered before it is saved (the save is held); saved
	// within laterDelay all the same.
	if err := c.Call(ctx, 2, u32(0), &res); err != nil || res.v != 2 {
		t.Fatalf("SaveLater: %v %d", err, res.v)
	}
	st.gate <- struct{}{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, saved := st.counts(); saved == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the SaveLater reply was not saved")
		}
	}
}

// TestDRCPersistRestart: a new server loading the saved replies answers a
// retransmission with the original reply; one older than the age bound is
// executed again.
func TestDRCPersistRestart(t *testing.T) {
	st := &memStore{}
	var counter atomic.Int64
	ctx := context.Background()
	_, drc, addr := persistServer(t, st, time.Minute, &counter)
	c := dial(t, "tcp", addr, 3)
	xid := c.NextXID()
	var a u32res
	if err := c.CallXID(ctx, xid, 1, u32(7), &a); err != nil || a.v != 1 {
		t.Fatalf("first: %v %d", err, a.v)
	}
	c.Close()
	_ = drc

	// The restarted server: same store, new cache.
	_, drc2, addr2 := persistServer(t, st, time.Minute, &counter)
	if drc2.Loaded() != 1 {
		t.Fatalf("loaded %d replies", drc2.Loaded())
	}
	c2 := dial(t, "tcp", addr2, 3)
	var b u32res
	if err := c2.CallXID(ctx, xid, 1, u32(7), &b); err != nil || b.v != 1 || counter.Load() != 1 {
		t.Fatalf("retransmission after the restart: %v reply %d, executed %d times", err, b.v, counter.Load())
	}
	// Other arguments with the same xid: another call.
	if err := c2.CallXID(ctx, xid, 1, u32(8), &b); err != nil || b.v != 2 {
		t.Fatalf("same xid, other arguments: %v %d", err, b.v)
	}

	// Past the age bound the saved reply is not a retransmission's answer.
	drc2.mu.Lock()
	drc2.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	drc2.mu.Unlock()
	if err := c2.CallXID(ctx, xid, 1, u32(7), &b); err != nil || b.v != 3 {
		t.Fatalf("retransmission past the age bound: %v %d, want executed again (3)", err, b.v)
	}
}

// TestDRCPersistIntent: an intent saved by a call whose reply was not saved
// (the server was killed in between) is resolved by DRC.Intents when the next
// server starts; the retransmission is executed with the resolved intent, and
// the resolution is saved for a further restart. A reply saved after an
// intent answers the retransmission as any saved reply does.
func TestDRCPersistIntent(t *testing.T) {
	st := &memStore{}
	var counter atomic.Int64
	ctx := context.Background()
	_, _, addr := persistServer(t, st, time.Minute, &counter)
	c := dial(t, "tcp", addr, 3)
	answered, killed := c.NextXID(), c.NextXID()
	var a u32res
	for _, xid := range []uint32{answered, killed} {
		if err := c.CallXID(ctx, xid, 3, u32(7), &a); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	st.mu.Lock()
	var kept []SavedReply
	for _, r := range st.saved {
		if r.Key.XID != killed || r.Intent {
			kept = append(kept, r)
		}
	}
	if len(kept) != 3 {
		st.mu.Unlock()
		t.Fatalf("saved %d records, want 2 intents and 2 replies", len(st.saved))
	}
	st.saved = kept // the reply of killed was never saved
	st.mu.Unlock()

	_, drc2, addr2 := persistServer(t, st, time.Minute, &counter)
	var seen []string
	err := drc2.Intents(func(k DRCKey, b []byte) []byte {
		seen = append(seen, string(b))
		if k.XID != killed {
			t.Errorf("resolve called for xid %d, want only %d", k.XID, killed)
		}
		return []byte("resolved")
	})
	if err != nil || len(seen) != 1 || seen[0] != "pending" {
		t.Fatalf("Intents: %v, resolved %q", err, seen)
	}
	c2 := dial(t, "tcp", addr2, 3)
	if err := c2.CallXID(ctx, answered, 3, u32(7), &a); err != nil || a.v != 1 {
		t.Fatalf("the answered call retransmitted: %v %d, want its reply (1)", err, a.v)
	}
	// A third server, as if killed again before the retransmission: the
	// resolution was saved.
	_, drc3, addr3 := persistServer(t, st, time.Minute, &counter)
	if err := drc3.Intents(func(k DRCKey, b []byte) []byte {
		if string(b) != "resolved" {
			t.Errorf("after a further restart the intent is %q, want the saved resolution", b)
		}
		return b
	}); err != nil {
		t.Fatal(err)
	}
	c3 := dial(t, "tcp", addr3, 3)
	if err := c3.CallXID(ctx, killed, 3, u32(7), &a); err != nil || a.v != 1003 {
		t.Fatalf("the killed call retransmitted: %v %d, want executed with its intent (1003)", err, a.v)
	}
	// Its reply is saved now: a further retransmission gets it.
	if err := c3.CallXID(ctx, killed, 3, u32(7), &a); err != nil || a.v != 1003 || counter.Load() != 3 {
		t.Fatalf("retransmitted again: %v %d, executed %d times", err, a.v, counter.Load())
	}
}

// TestDRCPersistGroupCommit: replies made while a save runs share the next
// save.
func TestDRCPersistGroupCommit(t *testing.T) {
	st := &memStore{gate: make(chan struct{})}
	var counter atomic.Int64
	_, drc, addr := persistServer(t, st, 0, &counter)
	ctx := context.Background()
	const n = 10
	var wg sync.WaitGroup
	for i := range n {
		c := dial(t, "tcp", addr, 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r u32res
			if err := c.Call(ctx, 1, u32(i), &r); err != nil {
				t.Error(err)
			}
		}()
	}
	// Wait until the first save is held and the other replies are queued.
	for deadline := time.Now().Add(10 * time.Second); ; {
		drc.persist.mu.Lock()
		q := len(drc.persist.queue)
		drc.persist.mu.Unlock()
		st.mu.Lock()
		held := st.held
		st.mu.Unlock()
		if held > 0 && held+q == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replies queued behind the held save", q)
		}
		time.Sleep(time.Millisecond)
	}
	st.gate <- struct{}{}
	st.gate <- struct{}{}
	wg.Wait()
	if saves, saved := st.counts(); saves != 2 || saved != n {
		t.Fatalf("%d saves for %d replies, want 2 for %d", saves, saved, n)
	}
}
