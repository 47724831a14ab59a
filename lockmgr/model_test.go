package lockmgr

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The model: a brute-force lock manager over a few small files, byte by
// byte. Bytes 0..modelN-1 are offsets; byte modelN stands for every offset
// from modelN on (random ranges start below it, so those bytes always share
// one fate). It is written without the machine's range code, and its rules
// are the doc's, applied byte by byte.
const (
	modelN      = 12
	modelFiles  = 2
	modelOwners = 4
)

var modelOwnerList = [modelOwners]Owner{{1, "p1"}, {1, "p2"}, {2, "q"}, {3, "r"}}

type bytes [modelN + 1]LockType

type mreq struct {
	req     ReqID
	file    int
	owner   int
	t       LockType
	lo, hi  int // bytes lo..hi
	r       Range
	block   bool
	retryAt time.Time
}

type mgrant struct {
	mreq
	shadow    bytes
	untouched [modelN + 1]bool
}

type mshare struct {
	on     bool
	mode   ShareMode
	access ShareAccess
}

type model struct {
	graceEnd time.Time
	now      time.Time
	shares   [modelFiles][modelOwners]mshare
	held     [modelFiles][modelOwners]bytes
	waiters  [modelFiles][]*mreq
	granting [modelFiles][]*mgrant // callbacks out, in grant order
	max      int
	retry    time.Duration
}

func modelRange(lo, hi int) Range {
	if hi == modelN {
		return Range{uint64(lo), ToEnd}
	}
	return Range{uint64(lo), uint64(hi)}
}

// runs is the owner's records as maximal runs of one type.
func runs(b *bytes) []span {
	var out []span
	for i := 0; i <= modelN; {
		if b[i] == Unlocked {
			i++
			continue
		}
		j := i
		for j+1 <= modelN && b[j+1] == b[i] {
			j++
		}
		out = append(out, span{modelRange(i, j), b[i]})
		i = j + 1
	}
	return out
}

func conflictT(a, b LockType) bool {
	return a != Unlocked && b != Unlocked && (a == Write || b == Write)
}

func (md *model) count(c ClientID) int {
	n := 0
	for f := range modelFiles {
		for o := range modelOwners {
			if modelOwnerList[o].Client == c {
				n += len(runs(&md.held[f][o]))
			}
		}
		for _, w := range md.waiters[f] {
			if modelOwnerList[w.owner].Client == c {
				n += 2
			}
		}
		for o := range modelOwners {
			if modelOwnerList[o].Client == c && md.shares[f][o].on {
				n++
			}
		}
	}
	return n
}

// heldBy reports whether owner o holds a byte of lo..hi conflicting with t.
func (md *model) heldBy(f, o int, t LockType, lo, hi int) bool {
	for b := lo; b <= hi; b++ {
		if conflictT(md.held[f][o][b], t) {
			return true
		}
	}
	return false
}

// blockers lists the owners a request waits for, and the first conflict:
// held records by start then owner, else the first earlier waiter.
func (md *model) blockers(f, o int, t LockType, lo, hi int, before int) ([]int, Lock, bool) {
	var owners []int
	var first Lock
	found := false
	for p := range modelOwners {
		if p == o || !md.heldBy(f, p, t, lo, hi) {
			continue
		}
		owners = append(owners, p)
		for _, s := range runs(&md.held[f][p]) {
			if s.r.Start <= uint64(hi) && s.r.End >= uint64(lo) && conflictT(s.t, t) {
				l := Lock{modelOwnerList[p], s.t, s.r}
				if !found || l.Range.Start < first.Range.Start || l.Range.Start == first.Range.Start && l.Owner.less(first.Owner) {
					first, found = l, true
				}
			}
		}
	}
	heldFound := found
	for i, w := range md.waiters[f] {
		if i >= before {
			break
		}
		if w.owner == o || w.hi < lo || w.lo > hi || !conflictT(w.t, t) || md.heldBy(f, o, w.t, w.lo, w.hi) {
			continue
		}
		owners = append(owners, w.owner)
		if !heldFound && !found {
			first, found = Lock{modelOwnerList[w.owner], w.t, w.r}, true
		}
	}
	return owners, first, found
}

func (md *model) deadlock(o int, start []int) bool {
	seen := map[int]bool{}
	stack := slices.Clone(start)
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p == o {
			return true
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		for f := range modelFiles {
			for i, w := range md.waiters[f] {
				if w.owner == p {
					bs, _, _ := md.blockers(f, p, w.t, w.lo, w.hi, i)
					stack = append(stack, bs...)
				}
			}
		}
	}
	return false
}

// touch: the owner changed lo..hi; pending grants of it forget those bytes.
func (md *model) touch(f, o, lo, hi int) {
	for _, g := range md.granting[f] {
		if g.owner == o {
			for b := lo; b <= hi; b++ {
				g.untouched[b] = false
			}
		}
	}
}

func (md *model) apply(f, o int, t LockType, lo, hi int) {
	for b := lo; b <= hi; b++ {
		md.held[f][o][b] = t
	}
}

// after is the owner's bytes with lo..hi set to t.
func (md *model) after(f, o int, t LockType, lo, hi int) bytes {
	b := md.held[f][o]
	for i := lo; i <= hi; i++ {
		b[i] = t
	}
	return b
}

func (md *model) raises(f, o int, t LockType, lo, hi int) bool {
	for b := lo; b <= hi; b++ {
		if md.held[f][o][b] < t {
			return true
		}
	}
	return false
}

func (md *model) waiterIndex(f int, req ReqID) int {
	return slices.IndexFunc(md.waiters[f], func(w *mreq) bool { return w.req == req })
}

// grantWaiter checks that the waiter may be granted now (the fairness rule)
// and applies its grant; its callback is then out.
func (md *model) grantWaiter(t testing.TB, f int, req ReqID) {
	i := md.waiterIndex(f, req)
	if i < 0 {
		t.Fatalf("grant of req %d, not a waiter", req)
	}
	w := md.waiters[f][i]
	if md.now.Before(md.graceEnd) {
		t.Fatalf("waiter %d granted in the grace period", req)
	}
	if bs, first, _ := md.blockers(f, w.owner, w.t, w.lo, w.hi, i); len(bs) > 0 {
		t.Fatalf("waiter %d (%v %v %v) granted while blocked by %v", req, modelOwnerList[w.owner], w.t, w.r, first)
	}
	md.waiters[f] = slices.Delete(md.waiters[f], i, i+1)
	g := &mgrant{mreq: *w, shadow: md.held[f][w.owner]}
	for b := w.lo; b <= w.hi; b++ {
		g.untouched[b] = true
	}
	md.touch(f, w.owner, w.lo, w.hi)
	md.apply(f, w.owner, w.t, w.lo, w.hi)
	md.granting[f] = append(md.granting[f], g)
}

func (md *model) backOut(f int, g *mgrant) {
	for b := g.lo; b <= g.hi; b++ {
		if g.untouched[b] {
			md.held[f][g.owner][b] = min(g.shadow[b], g.t)
		}
	}
}

func (md *model) removeGrant(f int, req ReqID) *mgrant {
	i := slices.IndexFunc(md.granting[f], func(g *mgrant) bool { return g.req == req })
	if i < 0 {
		return nil
	}
	g := md.granting[f][i]
	md.granting[f] = slices.Delete(md.granting[f], i, i+1)
	return g
}

// check compares everything observable with the model.
// The Test sweep covers file only (-1: every file), for speed.
func (md *model) check(t testing.TB, h *harness, step int, ops []string, only int) {
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d: %s\nlast ops:\n%s", step, fmt.Sprintf(format, args...), strings.Join(ops[max(0, len(ops)-12):], "\n"))
	}
	for f := range modelFiles {
		key := FileKey(fmt.Sprint("f", f))
		for o := range modelOwners {
			if got, want := h.m.ownerSpans(key, modelOwnerList[o]), runs(&md.held[f][o]); !spansEqual(got, want) {
				fail("file %d owner %d: machine %v, model %v", f, o, got, want)
			}
			for p := o + 1; p < modelOwners; p++ {
				for b := 0; b <= modelN; b++ {
					if conflictT(md.held[f][o][b], md.held[f][p][b]) {
						fail("file %d byte %d: owners %d and %d hold %v and %v", f, b, o, p, md.held[f][o][b], md.held[f][p][b])
					}
				}
			}
		}
		var want []ReqID
		for i, w := range md.waiters[f] {
			want = append(want, w.req)
			// Nothing left waiting that could go (after the grace period).
			if bs, _, _ := md.blockers(f, w.owner, w.t, w.lo, w.hi, i); len(bs) == 0 && !h.now.Before(w.retryAt) && !h.now.Before(md.graceEnd) {
				fail("file %d: waiter %d could be granted", f, w.req)
			}
		}
		var got []ReqID
		for _, w := range h.m.Waiters(key) {
			got = append(got, w.Req)
		}
		if !slices.Equal(got, want) {
			fail("file %d waiters: machine %v, model %v", f, got, want)
		}
		// Test agrees for every owner, range and type.
		for o := range modelOwners {
			if only >= 0 && f != only {
				break
			}
			for lo := 0; lo < modelN; lo++ {
				for _, hi := range []int{lo, min(lo+2, modelN-1), modelN} {
					for _, ty := range []LockType{Read, Write} {
						res := h.m.Test(h.now, key, modelOwnerList[o], ty, modelRange(lo, hi))
						_, first, found := md.blockers(f, o, ty, lo, hi, len(md.waiters[f]))
						want := Result{Verdict: Granted}
						if found {
							want = Result{Verdict: Denied, Holder: first}
						}
						if h.now.Before(md.graceEnd) {
							want = Result{Verdict: Grace}
						}
						if res != want {
							fail("Test(f%d, owner %d, %v, %v) = %v, model %v", f, o, ty, modelRange(lo, hi), res, want)
						}
					}
				}
			}
		}
	}
	for c := ClientID(1); c <= 3; c++ {
		if got, want := h.m.Count(c), md.count(c); got != want {
			fail("client %d count: machine %d, model %d", c, got, want)
		}
	}
	h.checkMirror()
}

// intSource is where the operations come from: a seeded generator, or the
// fuzzer's bytes.
type intSource interface{ IntN(n int) int }

// fuzzBytes reads choices from the fuzzer's input, zeros past its end.
type fuzzBytes []byte

func (b *fuzzBytes) IntN(n int) int {
	if len(*b) == 0 {
		return 0
	}
	v := int((*b)[0])
	*b = (*b)[1:]
	return v % n
}

// runModel drives a machine and the model with a seeded sequence of random
// operations and checks them against each other after each.
func runModel(t testing.TB, rng intSource, steps int, sweepAll bool) {
	md := &model{max: 8, retry: 300 * time.Millisecond}
	h := newHarness(t, Config{MaxPerClient: md.max, LocalRetry: md.retry})
	var ops []string
	var immediate *mreq
	var answer Result
	fileOf := func(k FileKey) int { return int(k[1] - '0') }
	h.observe = func(a Action, ok bool) {
		f := fileOf(a.File)
		switch {
		case a.Kind == ActGranted:
			if md.waiterIndex(f, a.Req) >= 0 {
				md.grantWaiter(t, f, a.Req)
			} else if i := slices.IndexFunc(md.granting[f], func(g *mgrant) bool { return g.req == a.Req }); i < 0 {
				t.Fatalf("ActGranted %v of no request", a)
			}
		case a.Kind == ActBacking && a.Acquire:
			if immediate != nil && a.Req == immediate.req {
				q := immediate
				immediate = nil
				switch {
				case ok:
					md.touch(f, q.owner, q.lo, q.hi)
					md.apply(f, q.owner, q.t, q.lo, q.hi)
					answer = Result{Verdict: Granted}
				case q.block && md.count(modelOwnerList[q.owner].Client)+2 <= md.max:
					q.retryAt = h.now.Add(md.retry)
					md.waiters[f] = append(md.waiters[f], q)
					answer = Result{Verdict: Blocked, Req: q.req}
				default:
					answer = Result{Verdict: Denied, Local: true}
				}
				return
			}
			if ok {
				md.grantWaiter(t, f, a.Req)
			} else if i := md.waiterIndex(f, a.Req); i >= 0 {
				md.waiters[f][i].retryAt = h.now.Add(md.retry)
			} else {
				t.Fatalf("acquisition %v of no request", a)
			}
		}
	}
	var nextReq ReqID
	for step := range steps {
		f := rng.IntN(modelFiles)
		key := FileKey(fmt.Sprint("f", f))
		o := rng.IntN(modelOwners)
		owner := modelOwnerList[o]
		lo := rng.IntN(modelN)
		hi := lo + rng.IntN(min(4, modelN-lo))
		if rng.IntN(4) == 0 {
			hi = modelN
		}
		r := modelRange(lo, hi)
		md.now = h.now
		inGrace := h.now.Before(md.graceEnd)
		switch op := rng.IntN(24); {
		case op < 8: // Lock
			ty := Read + LockType(rng.IntN(2))
			block := rng.IntN(2) == 0
			reclaim := rng.IntN(4) == 0
			nextReq++
			ops = append(ops, fmt.Sprintf("lock req=%d f%d owner %d %v %v block=%v reclaim=%v", nextReq, f, o, ty, r, block, reclaim))
			q := &mreq{req: nextReq, file: f, owner: o, t: ty, lo: lo, hi: hi, r: r, block: block}
			// The model's verdict.
			var want Result
			dup := slices.IndexFunc(md.waiters[f], func(w *mreq) bool { return w.owner == o && w.t == ty && w.r == r })
			bs, first, found := md.blockers(f, o, ty, lo, hi, len(md.waiters[f]))
			c := md.count(owner.Client)
			nb := md.after(f, o, ty, lo, hi)
			delta := len(runs(&nb)) - len(runs(&md.held[f][o]))
			switch {
			case inGrace && !reclaim:
				want = Result{Verdict: Grace}
			case block && dup >= 0:
				want = Result{Verdict: Blocked, Req: md.waiters[f][dup].req}
			case found && (!block || reclaim):
				want = Result{Verdict: Denied, Holder: first}
			case found && md.deadlock(o, bs):
				want = Result{Verdict: Deadlock}
			case found && c+2 > md.max:
				want = Result{Verdict: NoLocks}
			case found:
				want = Result{Verdict: Blocked, Req: q.req}
			case delta > 0 && c+delta > md.max:
				want = Result{Verdict: NoLocks}
			case md.raises(f, o, ty, lo, hi):
				want = Result{Verdict: Acquiring}
			default:
				want = Result{Verdict: Granted}
			}
			res, acts := h.m.Lock(h.now, LockArgs{Req: q.req, File: key, Owner: owner, Type: ty, Range: r, Block: block, Reclaim: reclaim})
			if res != want {
				t.Fatalf("step %d: %s: %v, model %v\n%s", step, ops[len(ops)-1], res, want, strings.Join(ops, "\n"))
			}
			switch res.Verdict {
			case Granted:
				md.touch(f, o, lo, hi)
				md.apply(f, o, ty, lo, hi)
			case Blocked:
				if dup < 0 {
					md.waiters[f] = append(md.waiters[f], q)
				}
			case Acquiring:
				immediate = q
			}
			h.do(acts)
			if res.Verdict == Acquiring && (immediate != nil || h.answers[q.req] != answer) {
				t.Fatalf("step %d: acquisition answered %v, model %v", step, h.answers[q.req], answer)
			}
		case op < 12: // Unlock
			ops = append(ops, fmt.Sprintf("unlock f%d owner %d %v", f, o, r))
			nb := md.after(f, o, Unlocked, lo, hi)
			delta := len(runs(&nb)) - len(runs(&md.held[f][o]))
			want := Granted
			if delta > 0 && md.count(owner.Client)+delta > md.max {
				want = NoLocks
			} else {
				md.touch(f, o, lo, hi)
				md.apply(f, o, Unlocked, lo, hi)
			}
			v, acts := h.m.Unlock(h.now, key, owner, r)
			if v != want {
				t.Fatalf("step %d: unlock %v, model %v", step, v, want)
			}
			h.do(acts)
		case op < 14: // Cancel a waiter or a grant with its callback out
			var ca CancelArgs
			if len(md.waiters[f]) > 0 && rng.IntN(2) == 0 {
				w := md.waiters[f][rng.IntN(len(md.waiters[f]))]
				ca = CancelArgs{key, modelOwnerList[w.owner], w.t, w.r}
			} else if len(md.granting[f]) > 0 {
				g := md.granting[f][rng.IntN(len(md.granting[f]))]
				ca = CancelArgs{key, modelOwnerList[g.owner], g.t, g.r}
			} else {
				ca = CancelArgs{key, owner, Write, r}
			}
			ops = append(ops, fmt.Sprintf("cancel %v", ca))
			wantOK := true
			if i := slices.IndexFunc(md.waiters[f], func(w *mreq) bool {
				return modelOwnerList[w.owner] == ca.Owner && w.t == ca.Type && w.r == ca.Range
			}); i >= 0 {
				md.waiters[f] = slices.Delete(md.waiters[f], i, i+1)
			} else if i := slices.IndexFunc(md.granting[f], func(g *mgrant) bool {
				return modelOwnerList[g.owner] == ca.Owner && g.t == ca.Type && g.r == ca.Range
			}); i >= 0 {
				g := md.granting[f][i]
				md.granting[f] = slices.Delete(md.granting[f], i, i+1)
				md.backOut(f, g)
			} else {
				wantOK = false
			}
			ok, acts := h.m.Cancel(h.now, ca)
			if ok != wantOK {
				t.Fatalf("step %d: cancel %v, model %v", step, ok, wantOK)
			}
			h.do(acts)
		case op < 16: // a callback's outcome
			g := h.takeGranted()
			for _, a := range g {
				ok := rng.IntN(3) > 0
				ops = append(ops, fmt.Sprintf("granted req=%d ok=%v", a.Req, ok))
				if mg := md.removeGrant(fileOf(a.File), a.Req); mg != nil && !ok {
					md.backOut(fileOf(a.File), mg)
				}
				h.do(h.m.GrantDone(h.now, a.Req, ok))
			}
		case op < 17: // a local process locks or unlocks
			ty := LockType(rng.IntN(3))
			pid := 100 + rng.IntN(2)
			ok := h.k.localLock(key, pid, ty, r)
			ops = append(ops, fmt.Sprintf("local %d f%d %v %v: %v", pid, f, ty, r, ok))
		case op < 19: // time passes
			h.now = h.now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
			md.now = h.now
			ops = append(ops, fmt.Sprintf("tick %v", h.now.Format("05.000")))
			h.do(h.m.Tick(h.now))
		case op < 22: // share reservations
			mode, acc := ShareMode(rng.IntN(4)), ShareAccess(rng.IntN(4))
			reclaim := rng.IntN(4) == 0
			if rng.IntN(3) == 0 {
				ops = append(ops, fmt.Sprintf("unshare f%d owner %d", f, o))
				if md.shares[f][o].on {
					md.shares[f][o] = mshare{}
				}
				if v := h.m.Unshare(h.now, key, owner); v != Granted {
					t.Fatalf("step %d: unshare %v", step, v)
				}
				break
			}
			ops = append(ops, fmt.Sprintf("share f%d owner %d mode %d access %d reclaim=%v", f, o, mode, acc, reclaim))
			want := Granted
			for p := range modelOwners {
				s := md.shares[f][p]
				if p != o && s.on && (acc&AccessRead != 0 && s.mode&DenyRead != 0 || acc&AccessWrite != 0 && s.mode&DenyWrite != 0 ||
					s.access&AccessRead != 0 && mode&DenyRead != 0 || s.access&AccessWrite != 0 && mode&DenyWrite != 0) {
					want = Denied
				}
			}
			switch {
			case inGrace && !reclaim:
				want = Grace
			case want == Denied:
			case !md.shares[f][o].on && md.count(owner.Client)+1 > md.max:
				want = NoLocks
			default:
				md.shares[f][o] = mshare{true, mode, acc}
			}
			if v := h.m.Share(h.now, ShareArgs{File: key, Owner: owner, Mode: mode, Access: acc, Reclaim: reclaim}); v != want {
				t.Fatalf("step %d: share %v, model %v", step, v, want)
			}
		case op < 23: // the grace period starts or ends
			if rng.IntN(2) == 0 {
				d := time.Duration(rng.IntN(1000)) * time.Millisecond
				ops = append(ops, fmt.Sprintf("grace %v", d))
				md.graceEnd = h.now.Add(d)
				// A grace period shortened to end now grants what it held
				// back in StartGrace's own actions (no Tick here).
				h.do(h.m.StartGrace(h.now, d))
			} else {
				ops = append(ops, "end grace")
				md.graceEnd = time.Time{}
				h.do(h.m.EndGrace(h.now))
			}
		default: // a client goes
			c := owner.Client
			ops = append(ops, fmt.Sprintf("client %d gone", c))
			for mf := range modelFiles {
				for p := range modelOwners {
					if modelOwnerList[p].Client == c {
						md.shares[mf][p] = mshare{}
					}
				}
				md.waiters[mf] = slices.DeleteFunc(md.waiters[mf], func(w *mreq) bool { return modelOwnerList[w.owner].Client == c })
				md.granting[mf] = slices.DeleteFunc(md.granting[mf], func(g *mgrant) bool { return modelOwnerList[g.owner].Client == c })
				for p := range modelOwners {
					if modelOwnerList[p].Client == c {
						md.held[mf][p] = bytes{}
					}
				}
			}
			h.do(h.m.ClientGone(h.now, c))
		}
		only := f
		if sweepAll {
			only = -1
		}
		md.check(t, h, step, ops, only)
	}
	drain(t, h)
}

// drain answers every callback and lets every client go: nothing may be
// left behind.
func drain(t testing.TB, h *harness) {
	h.observe = nil // the model is done
	h.confirm(true)
	for c := ClientID(1); c <= 3; c++ {
		h.do(h.m.ClientGone(h.now, c))
	}
	h.confirm(true)
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.files) != 0 || len(m.reqs) != 0 || len(m.waiting) != 0 || len(m.count) != 0 {
		t.Fatalf("left behind: %d files, %d requests, %d owners waiting, %d counts", len(m.files), len(m.reqs), len(m.waiting), len(m.count))
	}
	for f, owners := range h.k.ofd {
		if len(owners) != 0 {
			t.Fatalf("backing file %q still locked: %v", f, owners)
		}
	}
}

func TestModel(t *testing.T) {
	seeds, steps := 30, 300
	if testing.Short() {
		seeds = 10
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runModel(t, rand.New(rand.NewPCG(uint64(seed), 24)), steps, true)
		})
	}
}

// FuzzModel drives the machine and the model with operations read from the
// input. In CI it runs with an execution count (-fuzztime 50000x).
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("\x00\x00\x03\x01\x01\x01\x00\x02\x03\x01\x00\x00\x09\x02\x00\x00\x0b\x01\x00\x00"))
	for seed := range 4 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		b := make([]byte, 400)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := fuzzBytes(data)
		runModel(t, &src, min(len(data)/6, 100), false)
	})
}
