package state

import (
	"testing"
	"time"
)

// dirHarness drives a Dirs with an injected clock, keeping the breaks sent
// and the parked changes answered.
type dirHarness struct {
	t       *testing.T
	d       *Dirs
	now     time.Time
	calls   []Callback
	proceed map[ReqID]bool
	// timedOut lists the clients whose breaks passed their deadline.
	timedOut []ClientID
}

func newDirHarness(t *testing.T, cfg DirConfig) *dirHarness {
	return &dirHarness{t: t, d: NewDirs(cfg, t0), now: t0, proceed: map[ReqID]bool{}}
}

func (h *dirHarness) absorb(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case ActCallback:
			if a.Callback.Mode != Invalidate {
				h.t.Fatalf("break with mode %v", a.Callback.Mode)
			}
			h.calls = append(h.calls, a.Callback)
			h.d.CallbackSent(h.now, a.Callback)
		case ActFence:
			h.timedOut = append(h.timedOut, a.Client)
		case ActProceed:
			if h.proceed[a.Req] {
				h.t.Fatalf("request %d answered twice", a.Req)
			}
			h.proceed[a.Req] = true
		default:
			h.t.Fatalf("unexpected action %v", a.Kind)
		}
	}
}

// list is a whole LISTDIR: begin, end with listed.
func (h *dirHarness) list(c ClientID, dir FileID, listed ...FileID) bool {
	tok, ok := h.d.BeginList(h.now, c, dir, []byte{byte(c), 0xd1})
	if !ok {
		return false
	}
	got, acts := h.d.EndList(h.now, tok, listed)
	h.absorb(acts)
	return got
}

func (h *dirHarness) change(req ReqID, by ClientID, self bool, objs ...FileID) Verdict {
	v, acts := h.d.Changed(h.now, req, by, self, objs)
	h.absorb(acts)
	return v
}

// answer answers every break out to c with o.
func (h *dirHarness) answer(c ClientID, o Outcome) int {
	n := 0
	rest := h.calls[:0]
	for _, cb := range h.calls {
		if cb.Client != c {
			rest = append(rest, cb)
			continue
		}
		n++
		h.absorb(h.d.CallbackDone(h.now, cb, o))
	}
	h.calls = rest
	return n
}

func (h *dirHarness) broken(c ClientID, dir FileID) bool {
	for _, cb := range h.calls {
		if cb.Client == c && cb.File == dir {
			return true
		}
	}
	return false
}

// TestDirsTable drives each rule of the directory promises through the table.
func TestDirsTable(t *testing.T) {
	const A, B, P = ClientID(1), ClientID(2), ClientID(9) // two protocol clients and a plain one
	D, E, f, g := fid(100), fid(101), fid(1), fid(2)
	for _, tc := range []struct {
		name string
		run  func(h *dirHarness)
	}{
		{"another client's change breaks and waits for the answer", func(h *dirHarness) {
			if !h.list(A, D, f) {
				t.Fatal("no promise")
			}
			if v := h.change(7, B, true, D); v != Wait {
				t.Fatalf("verdict %v, want wait", v)
			}
			if !h.broken(A, D) || h.proceed[7] {
				t.Fatal("no break, or the change answered before it")
			}
			h.answer(A, OK)
			if !h.proceed[7] || h.d.Holds(A, D) {
				t.Fatal("change not answered after the break, or the promise kept")
			}
		}},
		{"the changer's own promise is kept", func(h *dirHarness) {
			h.list(A, D)
			if v := h.change(7, A, true, D); v != Proceed || len(h.calls) != 0 || !h.d.Holds(A, D) {
				t.Fatalf("verdict %v, %d breaks", v, len(h.calls))
			}
		}},
		{"a plain client's change breaks every promise", func(h *dirHarness) {
			h.list(A, D)
			h.list(B, D)
			if v := h.change(7, P, true, D); v != Wait || len(h.calls) != 2 {
				t.Fatalf("verdict %v, %d breaks", v, len(h.calls))
			}
			h.answer(A, OK)
			if h.proceed[7] {
				t.Fatal("answered with a break still out")
			}
			h.answer(B, Stale)
			if !h.proceed[7] {
				t.Fatal("not answered after both breaks")
			}
		}},
		{"a listed object's attribute change breaks the listing's promise", func(h *dirHarness) {
			h.list(A, D, f)
			if v := h.change(7, B, true, g); v != Proceed || len(h.calls) != 0 {
				t.Fatal("an unlisted object broke the promise")
			}
			if v := h.change(8, B, true, f); v != Wait || !h.broken(A, D) {
				t.Fatal("a listed object's change did not break the promise")
			}
		}},
		{"a local process's change breaks at once and parks nothing", func(h *dirHarness) {
			h.list(A, D)
			if v := h.change(0, 0, false, D); v != Proceed || !h.broken(A, D) {
				t.Fatalf("verdict %v, broken %v", v, h.broken(A, D))
			}
		}},
		{"a rename breaks both directories", func(h *dirHarness) {
			h.list(A, D)
			h.list(A, E)
			h.change(7, B, true, D, E)
			if !h.broken(A, D) || !h.broken(A, E) {
				t.Fatal("not both broken")
			}
			h.answer(A, OK)
			if !h.proceed[7] {
				t.Fatal("not answered")
			}
		}},
		{"a change during the listing loses the promise", func(h *dirHarness) {
			h.list(A, D) // held from an earlier listing
			tok, ok := h.d.BeginList(h.now, A, D, []byte{1})
			if !ok {
				t.Fatal("refused")
			}
			h.change(7, B, true, f) // f not listed yet: remembered by the listing
			got, acts := h.d.EndList(h.now, tok, []FileID{f})
			h.absorb(acts)
			if got || !h.broken(A, D) {
				t.Fatalf("granted %v, broken %v: the listing may hold f's old attributes", got, h.broken(A, D))
			}
		}},
		{"the directory changed during the listing", func(h *dirHarness) {
			tok, _ := h.d.BeginList(h.now, A, D, []byte{1})
			h.change(7, B, true, D)
			if got, _ := h.d.EndList(h.now, tok, nil); got {
				t.Fatal("granted over a change")
			}
			h.answer(A, OK)
			if !h.proceed[7] {
				t.Fatal("change not answered")
			}
		}},
		{"no new promise while a break is out", func(h *dirHarness) {
			h.list(A, D)
			h.change(7, B, true, D)
			if h.list(A, D) {
				t.Fatal("granted while its break is out")
			}
			h.answer(A, OK)
			if !h.list(A, D) {
				t.Fatal("not granted once answered")
			}
		}},
		{"bounded per client", func(h *dirHarness) {
			for i := range 3 {
				if !h.list(A, fid(200+i)) {
					t.Fatalf("promise %d refused", i)
				}
			}
			if h.list(A, fid(300)) {
				t.Fatal("a fourth promise granted")
			}
			if !h.list(A, fid(200)) {
				t.Fatal("a held promise refused")
			}
			if !h.list(B, fid(300)) {
				t.Fatal("another client refused")
			}
			h.d.Release(h.now, A, fid(201))
			if !h.list(A, fid(300)) || h.d.Held(A) != 3 {
				t.Fatal("not granted after a release")
			}
		}},
		{"bounded listed objects", func(h *dirHarness) {
			if !h.list(A, D, f, g) {
				t.Fatal("refused")
			}
			if h.list(A, D, fid(3), fid(4)) || !h.broken(A, D) {
				t.Fatal("a promise past its listing bound")
			}
		}},
		{"an unanswered break ends at its deadline", func(h *dirHarness) {
			h.list(A, D)
			h.change(7, B, true, D)
			h.now = h.now.Add(time.Second - time.Millisecond)
			h.absorb(h.d.Tick(h.now))
			if h.proceed[7] {
				t.Fatal("answered before the deadline")
			}
			h.now = h.now.Add(time.Millisecond)
			h.absorb(h.d.Tick(h.now))
			if !h.proceed[7] || h.d.Holds(A, D) || h.d.Stats().Timeouts != 1 || len(h.timedOut) != 1 || h.timedOut[0] != A {
				t.Fatal("not answered at the deadline")
			}
			h.calls = nil
		}},
		{"a late answer changes nothing", func(h *dirHarness) {
			h.list(A, D)
			h.change(7, B, true, D)
			cb := h.calls[0]
			h.now = h.now.Add(time.Second)
			h.absorb(h.d.Tick(h.now))
			h.list(A, D)
			h.absorb(h.d.CallbackDone(h.now, cb, OK))
			if !h.d.Holds(A, D) {
				t.Fatal("a late answer broke the new promise")
			}
			h.calls = nil
		}},
		{"client gone answers the changes waiting for it", func(h *dirHarness) {
			h.list(A, D, f)
			h.change(7, B, true, D)
			h.absorb(h.d.ClientGone(h.now, A))
			if !h.proceed[7] || h.d.Stats().Promises != 0 || h.d.Stats().Listed != 0 {
				t.Fatalf("stats %+v", h.d.Stats())
			}
			h.calls = nil
		}},
		{"lost notifications break everything", func(h *dirHarness) {
			h.list(A, D)
			h.list(B, E)
			h.absorb(h.d.ChangedAll(h.now))
			if !h.broken(A, D) || !h.broken(B, E) {
				t.Fatal("not every promise broken")
			}
		}},
		{"one break serves two changes", func(h *dirHarness) {
			h.list(A, D)
			h.change(7, B, true, D)
			h.change(8, P, true, D)
			if len(h.calls) != 1 {
				t.Fatalf("%d breaks", len(h.calls))
			}
			h.answer(A, OK)
			if !h.proceed[7] || !h.proceed[8] {
				t.Fatal("both changes not answered")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newDirHarness(t, DirConfig{MaxPerClient: 3, MaxListed: 2, CallbackTimeout: time.Second})
			tc.run(h)
			st := h.d.Stats()
			if len(h.calls) == 0 && st.Listings != 0 {
				t.Fatalf("listings left: %+v", st)
			}
		})
	}
}

// TestDirsListedCensus checks that the reverse index empties with the
// promises: no promise leaves an object listed.
func TestDirsListedCensus(t *testing.T) {
	h := newDirHarness(t, DirConfig{})
	for i := range 50 {
		h.list(ClientID(1+i%3), fid(1000+i%7), fid(i), fid(i+1), fid(i+2))
	}
	h.change(1, 0, false, fid(10))
	for c := ClientID(1); c <= 3; c++ {
		h.answer(c, OK)
	}
	for c := ClientID(1); c <= 3; c++ {
		h.absorb(h.d.ClientGone(h.now, c))
	}
	if st := h.d.Stats(); st.Promises != 0 || st.Listed != 0 || len(h.d.listedIn) != 0 || len(h.d.dirs) != 0 || len(h.d.busy) != 0 {
		t.Fatalf("left: %+v listedIn %d dirs %d", st, len(h.d.listedIn), len(h.d.dirs))
	}
}

// promiseOf0 reports whether cb is the break out of a promise still held.
func (d *Dirs) promiseOf0(cb Callback) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.promiseOf(cb) != nil
}

// TestDirsFailList: a listing whose read failed takes back the promise it
// made (the client never learns of it), and leaves one held from before.
func TestDirsFailList(t *testing.T) {
	d := NewDirs(DirConfig{}, time.Unix(100, 0))
	now := time.Unix(101, 0)
	tok, ok := d.BeginList(now, 1, fid(7), []byte{7})
	if !ok {
		t.Fatal("no promise")
	}
	if acts := d.FailList(now, tok); len(acts) != 0 {
		t.Fatalf("actions %v", acts)
	}
	if st := d.Stats(); st.Promises != 0 || d.Active() {
		t.Fatalf("after a failed first listing: %+v, active %v", st, d.Active())
	}
	tok, _ = d.BeginList(now, 1, fid(7), []byte{7})
	if ok, _ := d.EndList(now, tok, []FileID{fid(8)}); !ok {
		t.Fatal("not promised")
	}
	tok, _ = d.BeginList(now, 1, fid(7), []byte{7})
	d.FailList(now, tok)
	if st := d.Stats(); st.Promises != 1 {
		t.Fatalf("a failed listing took back the promise held from before: %+v", st)
	}
}
