package state_test

import (
	"fmt"
	"slices"
	"time"

	"snfs/state"
	"snfs/state/clientfile"
)

// The both-ends model's client driver (model_client_test.go): what the
// mount does around its clientfile machine - OPEN answers applied, the
// cache relabelled, write-backs, reads and writes (through, into the
// cache, through passthrough), callbacks served in steps and their
// answers checked.

// maybeApply applies an OPEN's answer now or leaves it in transit. An answer
// refusing caching is applied at once: docs/protocol.md 4.2 leaves the window
// between its sending and its arrival open in version 1.
func (w *bWorld) maybeApply(c, f int, o *bOpen) {
	if o.answer.CacheEnabled && w.r.IntN(3) == 0 {
		w.logf("  (in transit)")
		return
	}
	w.apply(c, f, o)
}

// apply is the client driver applying an OPEN's answer: OpenAnswered, and
// now or in a later step (cached) OpenCached.
func (w *bWorld) apply(c, f int, o *bOpen) {
	s := w.cl[c][f]
	if o.failed {
		s.opens = slices.DeleteFunc(s.opens, func(x *bOpen) bool { return x == o })
		w.logf("%d: OPEN of f%d failed", c, f)
		s.f.OpenAnswered(&o.tok, state.OpenReply{}, fmt.Errorf("jukebox"))
		return
	}
	r := *o.answer
	acts := s.f.OpenAnswered(&o.tok, r, nil)
	w.logf("%d applies its OPEN of f%d for %v: %+v -> %v", c, f, o.tok.Mode, r, acts)
	w.do(c, f, acts)
	if !slices.ContainsFunc(acts, func(a clientfile.Action) bool { return a.Kind == clientfile.ActCache }) {
		s.opens = slices.DeleteFunc(s.opens, func(x *bOpen) bool { return x == o })
		s.handles = append(s.handles, o.tok.Mode)
		return
	}
	o.applied = true
	if w.r.IntN(2) == 0 {
		w.cached(c, f, o)
	}
}

// cached ends an OPEN that allowed caching: the cache is relabelled (what
// the version rule keeps is kept; dirty data is the client's own whatever
// the rule says), then OpenCached.
func (w *bWorld) cached(c, f int, o *bOpen) {
	s := w.cl[c][f]
	s.opens = slices.DeleteFunc(s.opens, func(x *bOpen) bool { return x == o })
	r := *o.answer
	if s.valid && !clientfile.Valid(s.label, r) && !s.f.Dirty() {
		s.valid = false
	}
	s.label = r.Version
	_, more := s.f.OpenCached(&o.tok, r, true)
	w.logf("%d: its OPEN of f%d cached: caching %v %v", c, f, s.f.Caching(), more)
	w.do(c, f, more)
	s.handles = append(s.handles, o.tok.Mode)
	if w.pt && o.tok.Mode == state.Write && s.f.Caching() && len(s.handles) == 1 && len(s.opens) == 0 && w.r.IntN(2) == 0 {
		s.pt = true
		s.f.PassthroughOpen(state.Write)
		w.logf("  its open passes through")
	}
}

// protoBusy reports whether an OPEN of f by c is in flight: the client's
// openMu serializes its OPENs, CLOSEs and delayed-close take-overs of a
// file with it (an OPEN's answer applied, its caching not yet, does not).
func (w *bWorld) protoBusy(c, f int) bool {
	return slices.ContainsFunc(w.cl[c][f].opens, func(o *bOpen) bool { return !o.applied })
}

// do carries out a client's actions (but ActCache, handled by apply, and
// ActAnswer, by the callback's steps).
func (w *bWorld) do(c, f int, acts []clientfile.Action) {
	s := w.cl[c][f]
	for _, a := range acts {
		switch a.Kind {
		case clientfile.ActSendClose:
			w.logf("  %d: CLOSE f%d %v dirty %v", c, f, a.Mode, a.Dirty)
			w.absorb(w.m.Close(w.now, state.CloseArgs{File: bFile(f), Client: state.ClientID(c), Mode: a.Mode, Dirty: a.Dirty}))
		case clientfile.ActArmTimer:
			s.timerAt = a.At
		case clientfile.ActStopTimer:
			s.timerAt = time.Time{}
		case clientfile.ActWriteBack, clientfile.ActPinSync:
			w.writeBack(c, f)
		case clientfile.ActInvalidateCache:
			if s.f.Dirty() {
				w.fail("%d: cache of f%d invalidated while dirty", c, f)
			}
			s.valid = false
		case clientfile.ActReintegrate:
			w.fail("%d: reintegration of f%d (nothing here fences or refuses)", c, f)
		case clientfile.ActCache, clientfile.ActAnswer:
		}
	}
}

// writeBack sends the dirty value (a covered WRITE and COMMIT), after the
// write-back in progress if there is one (flushMu: one at a time).
func (w *bWorld) writeBack(c, f int) {
	w.writeBackEnd(c, f)
	if w.writeBackBegin(c, f) {
		w.writeBackEnd(c, f)
	}
}

func (w *bWorld) writeBackBegin(c, f int) bool {
	s := w.cl[c][f]
	wb, ok := s.f.WriteBackBegin()
	if !ok {
		return false
	}
	w.access(c, f, state.AccessWrite)
	w.server[f] = s.val
	w.logf("  %d writes f%d = %d back", c, f, s.val)
	s.wb = &wb
	return true
}

func (w *bWorld) writeBackEnd(c, f int) {
	s := w.cl[c][f]
	if s.wb == nil {
		return
	}
	wb := *s.wb
	s.wb = nil
	acts := s.f.WriteBackDone(wb, clientfile.WBDone)
	w.logf("  %d: write-back of f%d done (dirty %v)", c, f, s.f.Dirty())
	w.do(c, f, acts)
}

// access is a protocol client's READ or WRITE of a file it holds: covered,
// it proceeds at once.
func (w *bWorld) access(c, f int, k state.AccessKind) {
	if w.tryAccess(c, f, k) {
		fi, _ := w.m.Lookup(w.now, bFile(f))
		w.fail("%v by %d of f%d not covered: it waits (%+v)", k, c, f, fi)
	}
}

// tryAccess is access that may wait behind another client's pinned
// holding (docs/protocol.md 10.1): then it reports true, and the
// application's read or write is finished by proceed.
func (w *bWorld) tryAccess(c, f int, k state.AccessKind) (parked bool) {
	w.nextReq++
	req := w.nextReq
	v, acts := w.m.PlainAccess(w.now, req, state.AccessArgs{File: bFile(f), Handle: []byte{byte(f)}, Client: state.ClientID(c), Kind: k})
	if v == state.Proceed && len(acts) == 0 {
		return false
	}
	fi, _ := w.m.Lookup(w.now, bFile(f))
	if v != state.Wait || !slices.ContainsFunc(fi.Holders, func(h state.HolderInfo) bool { return int(h.Client) != c && h.Pinned }) {
		w.fail("%v by %d of f%d not covered: %v %+v (%+v)", k, c, f, v, acts, fi)
	}
	w.logf("  %v by %d of f%d waits behind a pinned holder (req %d)", k, c, f, req)
	w.cl[c][f].parked = &bAccess{req: req, kind: k}
	w.absorb(acts)
	return true
}

// proceed finishes a parked READ or WRITE: the pinned holder has written
// back what it wrote before the request came, so the server has the latest.
func (w *bWorld) proceed(a state.Action) {
	for c := range w.cl {
		for f := range bFiles {
			s := w.cl[c][f]
			if s.parked == nil || s.parked.req != a.Req {
				continue
			}
			k := s.parked.kind
			s.parked = nil
			w.logf("  -> proceed %v by %d of f%d", k, c, f)
			if k == state.AccessRead {
				w.logf("%d reads f%d: %d (after waiting)", c, f, w.server[f])
				if w.server[f] != w.latest[f] {
					w.fail("stale read: %d read f%d = %d after waiting behind the pinned holder, latest %d", c, f, w.server[f], w.latest[f])
				}
				return
			}
			w.nextVal++
			w.server[f], w.latest[f] = w.nextVal, w.nextVal
			s.valid = false
			w.logf("%d writes f%d = %d through (after waiting)", c, f, w.nextVal)
			return
		}
	}
	w.fail("proceed of unknown request %d", a.Req)
}

// accessAnswered handles JUKEBOX (or a refusal) of a parked READ or WRITE:
// the application's call fails (a write changes nothing).
func (w *bWorld) accessAnswered(a state.Action) bool {
	for c := range w.cl {
		for f := range bFiles {
			if s := w.cl[c][f]; s.parked != nil && s.parked.req == a.Req {
				w.logf("  -> %v to %d's parked %v of f%d", a.Kind, c, s.parked.kind, f)
				s.parked = nil
				return true
			}
		}
	}
	return false
}

func (w *bWorld) open(c, f int, mode state.Mode) {
	s := w.cl[c][f]
	if w.protoBusy(c, f) || s.pt || s.parked != nil {
		return
	}
	tok, acts := s.f.OpenBegin(mode)
	if tok.Reused {
		w.logf("%d opens f%d for %v: takes a delayed %v close over", c, f, mode, tok.Mode)
		s.handles = append(s.handles, tok.Mode)
		w.do(c, f, acts)
		return
	}
	w.nextReq++
	o := &bOpen{req: w.nextReq, tok: tok}
	s.opens = append(s.opens, o)
	w.logf("%d opens f%d for %v (req %d)", c, f, mode, o.req)
	res, sacts := w.m.Open(w.now, o.req, state.OpenArgs{File: bFile(f), Handle: []byte{byte(f)}, Client: state.ClientID(c), Mode: mode})
	switch res.Verdict {
	case state.Proceed:
		r := res.Reply
		o.answer = &r
		w.logf("  = %+v", r)
		w.absorb(sacts)
		w.maybeApply(c, f, o)
	case state.Wait:
		w.logf("  = wait")
		w.absorb(sacts)
	default:
		w.logf("  = %v", res.Verdict)
		w.absorb(sacts)
		o.failed = true
		w.apply(c, f, o)
	}
}

func (w *bWorld) release(c, f int) {
	s := w.cl[c][f]
	i := w.r.IntN(len(s.handles))
	mode := s.handles[i]
	s.handles = slices.Delete(s.handles, i, i+1)
	if s.pt {
		s.pt = false
		w.do(c, f, s.f.PassthroughClose(state.Write))
	}
	acts := s.f.Release(w.now, mode, false)
	w.logf("%d releases f%d (%v): %v", c, f, mode, acts)
	w.do(c, f, acts)
}

func (w *bWorld) read(c, f int) {
	s := w.cl[c][f]
	val := 0
	switch {
	case s.pt && !s.f.Caching():
		// The pinned holder (or one entering): its kernel reads the cache
		// file, refreshed from the server where it has sent everything.
		val = w.server[f]
		if s.f.Dirty() {
			val = s.val
		}
	case s.f.Caching() && s.valid:
		val = s.val
	case s.f.Caching():
		w.access(c, f, state.AccessRead)
		s.val, s.valid, s.label = w.server[f], true, s.f.Version()
		val = s.val
	default:
		w.do(c, f, s.f.Through())
		if w.tryAccess(c, f, state.AccessRead) {
			return
		}
		val = w.server[f]
	}
	w.logf("%d reads f%d: %d (cached %v)", c, f, val, s.f.Caching())
	if val != w.latest[f] {
		w.fail("stale read: %d read f%d = %d, latest %d", c, f, val, w.latest[f])
	}
}

func (w *bWorld) write(c, f int) {
	s := w.cl[c][f]
	if s.pt {
		// The kernel writes the cache file itself, cached or not.
		w.nextVal++
		w.latest[f] = w.nextVal
		s.val, s.valid = w.nextVal, true
		s.f.ExternalWrite()
		w.logf("%d writes f%d = %d through passthrough (pinned %v)", c, f, w.nextVal, s.f.Pinned())
		return
	}
	if s.f.CacheWriteBegin() {
		w.nextVal++
		w.latest[f] = w.nextVal
		s.val, s.valid = w.nextVal, true
		s.f.CacheWriteEnd()
		w.logf("%d writes f%d = %d into its cache", c, f, w.nextVal)
		return
	}
	w.do(c, f, s.f.Through()) // the cache's older dirty data goes first
	if w.tryAccess(c, f, state.AccessWrite) {
		return // the value is written when it proceeds
	}
	w.nextVal++
	w.latest[f] = w.nextVal
	w.server[f] = w.nextVal
	s.valid = false // the cache's clean data is older than this write
	w.logf("%d writes f%d = %d through", c, f, w.nextVal)
}

// callbackBegin serves a callback's first part: CallbackBegin and its work.
func (w *bWorld) callbackBegin(c, f int, bc *bCallback) {
	s := w.cl[c][f]
	tok, acts := s.f.CallbackBegin(bc.cb.Mode, s.valid || s.f.Dirty(), false)
	bc.begun, bc.tok, bc.pt = true, tok, s.pt
	w.logf("%d begins %v on f%d: %v", c, bc.cb.Mode, f, acts)
	if n := len(acts); n > 0 && acts[n-1].Kind == clientfile.ActAnswer {
		w.do(c, f, acts)
		w.answer(c, f, bc, acts[n-1].Outcome)
		return
	}
	i := slices.IndexFunc(acts, func(a clientfile.Action) bool { return a.Kind == clientfile.ActWriteBack })
	if i < 0 {
		i = len(acts)
	}
	w.do(c, f, acts[:i])
	bc.work = acts[i:]
}

// callbackWork does the rest of a begun callback's work.
func (w *bWorld) callbackWork(c, f int, bc *bCallback) {
	w.logf("%d works on %v on f%d: %v", c, bc.cb.Mode, f, bc.work)
	work := bc.work
	bc.work = nil
	w.do(c, f, work)
}

// callbackEnd finishes a begun callback and answers it.
func (w *bWorld) callbackEnd(c, f int, bc *bCallback) {
	s := w.cl[c][f]
	if len(bc.work) > 0 {
		w.callbackWork(c, f, bc)
	}
	for range 4 {
		acts := s.f.CallbackEnd(&bc.tok, false, false)
		w.logf("%d ends %v on f%d: %v", c, bc.cb.Mode, f, acts)
		w.do(c, f, acts)
		if n := len(acts); n > 0 && acts[n-1].Kind == clientfile.ActAnswer {
			w.answer(c, f, bc, acts[n-1].Outcome)
			return
		}
	}
	w.fail("callback never answered")
}

// answer checks the answer against docs/protocol.md 5.1 and sends it.
func (w *bWorld) answer(c, f int, bc *bCallback, out state.Outcome) {
	s := w.cl[c][f]
	i := slices.Index(s.calls, bc)
	s.calls = slices.Delete(s.calls, i, i+1)
	inFlight := len(s.opens) > 0
	switch out {
	case state.TreatAsClosed:
		if len(s.handles) > 0 || inFlight || s.f.Dirty() {
			w.fail("%d answered CB_TREAT_AS_CLOSED on f%d with %d application opens, %d OPENs in flight, dirty %v",
				c, f, len(s.handles), len(s.opens), s.f.Dirty())
		}
	case state.Stale:
		if len(s.handles) > 0 || inFlight || s.f.Dirty() || s.f.Held() > 0 {
			w.fail("%d answered CB_STALE on f%d holding something", c, f)
		}
	case state.OK:
	case state.Pinned:
		if !bc.pt {
			w.fail("%d answered CB_PINNED on f%d with no passthrough open for writing", c, f)
		}
		if !s.pt && s.f.Dirty() {
			// Without a write open the server takes it as CB_OK and
			// forgets the dirty record.
			w.fail("%d answered CB_PINNED on f%d, its passthrough open closed, dirty", c, f)
		}
	default:
		w.fail("%d answered %v on f%d", c, out, f)
	}
	w.logf("%d answers %v on f%d: %v", c, bc.cb.Mode, f, out)
	w.absorb(w.m.CallbackDone(w.now, bc.cb, out))
}
