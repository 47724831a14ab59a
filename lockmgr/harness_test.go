package lockmgr

import (
	"fmt"
	"testing"
	"time"
)

// kernel simulates the backing files' OFD locks: one description per (file,
// owner) for the machine's owners, and local processes' locks. It refuses a
// lock that conflicts with any other description's, as the kernel does.
type kernel struct {
	ofd   map[FileKey]map[Owner][]span
	local map[FileKey]map[int][]span
	// remoteRefusal is set when an acquisition was refused because of
	// another remote owner's description: the machine let the backing file
	// fall out of order.
	remoteRefusal string
}

func newKernel() *kernel {
	return &kernel{ofd: map[FileKey]map[Owner][]span{}, local: map[FileKey]map[int][]span{}}
}

// blockedBy reports which description's lock conflicts with (t, r), other
// than self (a remote owner) or selfLocal.
func (k *kernel) blockedBy(f FileKey, self *Owner, selfLocal int, t LockType, r Range) (string, bool) {
	for o, spans := range k.ofd[f] {
		if self != nil && o == *self {
			continue
		}
		if _, ok := conflicts(spans, t, r); ok {
			return "remote " + o.String(), true
		}
	}
	for p, spans := range k.local[f] {
		if self == nil && p == selfLocal {
			continue
		}
		if _, ok := conflicts(spans, t, r); ok {
			return fmt.Sprintf("local %d", p), true
		}
	}
	return "", false
}

// apply carries out an ActBacking; false if refused.
func (k *kernel) apply(a Action) bool {
	if k.ofd[a.File] == nil {
		k.ofd[a.File] = map[Owner][]span{}
	}
	cur := k.ofd[a.File][a.Owner]
	if a.Type != Unlocked && raises(cur, a.Range, a.Type) {
		// F_OFD_SETLK checks the whole requested range against others.
		if who, ok := k.blockedBy(a.File, &a.Owner, 0, a.Type, a.Range); ok {
			if who[0] == 'r' && k.remoteRefusal == "" {
				k.remoteRefusal = fmt.Sprintf("%v refused by %s", a, who)
			}
			return false
		}
	}
	next := setRange(cur, a.Range, a.Type)
	if len(next) == 0 {
		delete(k.ofd[a.File], a.Owner)
	} else {
		k.ofd[a.File][a.Owner] = next
	}
	return true
}

// localLock is a local process's F_SETLK: false if refused.
func (k *kernel) localLock(f FileKey, pid int, t LockType, r Range) bool {
	if t != Unlocked {
		if _, ok := k.blockedBy(f, nil, pid, t, r); ok {
			return false
		}
	}
	if k.local[f] == nil {
		k.local[f] = map[int][]span{}
	}
	k.local[f][pid] = setRange(k.local[f][pid], r, t)
	return true
}

// harness drives a Machine the way the driver must: actions in order, every
// acquisition answered by the kernel at once (depth first).
type harness struct {
	t       testing.TB
	m       *Machine
	now     time.Time
	k       *kernel
	granted []Action         // ActGranted, in order
	answers map[ReqID]Result // BackingDone results of immediate requests
	closed  map[FileKey]int  // ActBacking with Last
	nextReq ReqID
	// observe, if set, sees each ActBacking (with the backing file's
	// answer) and each ActGranted before the harness goes on.
	observe func(a Action, ok bool)
}

func newHarness(t testing.TB, cfg Config) *harness {
	now := time.Unix(1_000_000, 0)
	return &harness{t: t, m: New(cfg, now), now: now, k: newKernel(), answers: map[ReqID]Result{},
		closed: map[FileKey]int{}}
}

func (h *harness) do(acts []Action) {
	h.t.Helper()
	for _, a := range acts {
		switch a.Kind {
		case ActBacking:
			ok := h.k.apply(a)
			if h.k.remoteRefusal != "" {
				h.t.Fatalf("backing file out of order: %s", h.k.remoteRefusal)
			}
			if h.observe != nil {
				h.observe(a, ok)
			}
			if a.Last {
				h.closed[a.File]++
			}
			if !a.Acquire {
				if !ok {
					h.t.Fatalf("non-acquiring %v refused", a)
				}
				continue
			}
			res, more := h.m.BackingDone(h.now, a.Req, ok)
			h.answers[a.Req] = res
			h.do(more)
		case ActGranted:
			if h.observe != nil {
				h.observe(a, true)
			}
			h.granted = append(h.granted, a)
		default:
			h.t.Fatalf("unknown action %v", a)
		}
	}
}

// lock runs a Lock to its final answer (through BackingDone when Acquiring).
func (h *harness) lock(a LockArgs) Result {
	h.t.Helper()
	if a.Req == 0 {
		h.nextReq++
		a.Req = h.nextReq + 1000
	}
	res, acts := h.m.Lock(h.now, a)
	h.do(acts)
	if res.Verdict == Acquiring {
		var ok bool
		if res, ok = h.answers[a.Req]; !ok {
			h.t.Fatalf("Acquiring %v without an acquisition", a)
		}
	}
	return res
}

func (h *harness) unlock(f FileKey, o Owner, r Range) Verdict {
	h.t.Helper()
	v, acts := h.m.Unlock(h.now, f, o, r)
	h.do(acts)
	return v
}

// takeGranted returns and forgets the ActGranted seen so far.
func (h *harness) takeGranted() []Action {
	g := h.granted
	h.granted = nil
	return g
}

// confirm answers every outstanding ActGranted with ok.
func (h *harness) confirm(ok bool) []Action {
	h.t.Helper()
	g := h.takeGranted()
	for _, a := range g {
		h.do(h.m.GrantDone(h.now, a.Req, ok))
	}
	return g
}

// checkMirror asserts that each owner's description holds exactly its locks.
func (h *harness) checkMirror() {
	h.t.Helper()
	for fk, owners := range h.k.ofd {
		for o, spans := range owners {
			if got := h.m.ownerSpans(fk, o); !spansEqual(got, spans) {
				h.t.Fatalf("file %q owner %v: machine %v, backing %v", fk, o, got, spans)
			}
		}
	}
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	for fk, f := range h.m.files {
		for o, spans := range f.held {
			if !spansEqual(spans, h.k.ofd[fk][o]) {
				h.t.Fatalf("file %q owner %v: machine %v, backing %v", fk, o, spans, h.k.ofd[fk][o])
			}
		}
	}
}

func (m *Machine) ownerSpans(k FileKey, o Owner) []span {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.files[k]; f != nil {
		return f.held[o]
	}
	return nil
}

var (
	ownA = Owner{1, "a"}
	ownB = Owner{2, "b"}
	ownC = Owner{3, "c"}
	ownD = Owner{4, "d"}
)

func rg(start, end uint64) Range { return Range{start, end} }
