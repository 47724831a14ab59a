package state

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// TestPermitsModel drives Permits with seeded random interleavings of
// grants (pending ones cancelled by changes), holders' logged changes, other
// clients' changes (parked behind recalls), local processes' changes
// (recalling without waiting), recalls answered after reintegrating the log,
// recalls failed, releases, deadlines and clients going away, against a
// model of the directories on the server and of each holder's log, and
// checks the permit's meaning (docs/protocol.md section 21.4): when another
// client's change is made (the moment it sees the directory), every entry
// the holder's application was told exists, and was reintegrated at its
// recall or release, exists on the server, and every one it was told was
// removed does not - unless a later change of that name by someone else
// superseded it. Reintegration is the model's: at a recall, the holder
// applies its log if it still holds the permit (Holds), else its records are
// conflicts. Without local processes and deadlines, no record ever
// conflicts.
//
// Server restarts (docs/protocol.md section 21.9): the table is lost (a new
// Permits, ids of another start), the recalls out and the changes parked
// with it; each holder reclaims its permit (Permits.Reclaim) in a later
// step, its log kept, and until every holder has, no other client's change
// is made and no permit granted (the grace period's gate: answered
// JUKEBOX, tried again later). A log whose permit is not granted again is
// a permit lost: a change of its directory by someone else before that log
// is in breaks the permit's meaning (without deadlines, which revoke by
// design), and fails the model.
func TestPermitsModel(t *testing.T) {
	for seed := uint64(1); seed <= 400; seed++ {
		permitsModelRun(t, seed)
	}
}

type cmlEntry struct {
	name   int
	create bool
}

type modelPermit struct {
	id        uint64
	pending   bool
	log       []cmlEntry
	local     map[int]bool // the holder's view of the directory
	reclaimed bool         // false after a restart until the holder reclaimed it
}

type parkedChange struct {
	req    ReqID
	by     ClientID
	d      int
	name   int
	create bool
}

func permitsModelRun(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 11))
	const nClients, nDirs, nNames = 3, 2, 4
	withLocal := seed%2 == 0    // local processes change directories
	withDeadline := seed%3 == 0 // recalls may go unanswered past their deadline, or fail
	h := &permitHarness{t: t, p: NewPermits(PermitConfig{MaxPerClient: 2, MaxPermits: 3, CallbackTimeout: time.Second}, t0),
		now: t0, proceed: map[ReqID]bool{}}
	dirID := func(d int) FileID { return fid(200 + d) }
	dirOf := func(f FileID) int {
		for d := 0; d < nDirs; d++ {
			if dirID(d) == f {
				return d
			}
		}
		t.Fatalf("seed %d: unknown directory %v", seed, f)
		return -1
	}
	server := make([]map[int]bool, nDirs)
	for d := range server {
		server[d] = map[int]bool{}
	}
	held := map[[2]int]*modelPermit{}  // (client, dir)
	due := make([]map[int]bool, nDirs) // name -> exists, as the holder's application was told, reintegrated
	for d := range due {
		due[d] = map[int]bool{}
	}
	var parked []parkedChange
	conflicts, refused, gone := 0, 0, false
	starts := uint64(0)
	// graceLeft: after a restart, the holders that have not reclaimed yet
	// (the gate holds everyone else's changes and GET_PERMITs meanwhile);
	// lostLogs: by directory, the logs of permits not granted again.
	graceLeft := map[ClientID]bool{}
	lostLogs := map[int]int{}
	nextReq := ReqID(1)
	var trace []string
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("seed %d: %s\ntrace:\n%v", seed, fmt.Sprintf(format, a...), trace)
	}
	// see checks what a change by someone else finds when it is made.
	see := func(d int, by ClientID) {
		if lostLogs[d] > 0 && !withDeadline {
			fail("client %d's change of dir %d is made before %d records of a permit lost to a restart are in", by, d, lostLogs[d])
		}
		for k, mp := range held {
			if k[1] == d && ClientID(k[0]) != by && !mp.pending && len(mp.log) > 0 && !withDeadline {
				fail("client %d's change of dir %d is made while client %d holds %d records of it not sent (reclaimed %v)", by, d, k[0], len(mp.log), mp.reclaimed)
			}
		}
		for n, exists := range due[d] {
			if server[d][n] != exists {
				fail("client %d's change of dir %d sees name %d exists=%v; the holder's application was told %v", by, d, n, server[d][n], exists)
			}
		}
	}
	applyOther := func(d, n int, create bool) {
		server[d][n] = create
		delete(due[d], n) // superseded by a later change
	}
	// reintegrate sends the log of c's permit on d (or finds it refused).
	reintegrate := func(c ClientID, d int) {
		mp := held[[2]int{int(c), d}]
		if mp == nil {
			return
		}
		ok := h.p.Holds(c, dirID(d), mp.id)
		for _, e := range mp.log {
			if !ok {
				refused++ // the permit is gone: the client's conflicts
				continue
			}
			if server[d][e.name] == e.create {
				conflicts++ // the name was changed meanwhile by someone who did not wait
				continue
			}
			server[d][e.name] = e.create
			due[d][e.name] = e.create
		}
		mp.log = nil
	}
	forget := func(c ClientID, d int) {
		if mp := held[[2]int{int(c), d}]; mp != nil {
			refused += len(mp.log)
			delete(held, [2]int{int(c), d})
		}
	}
	runProceeds := func() {
		var rest []parkedChange
		for _, pc := range parked {
			if !h.proceed[pc.req] {
				rest = append(rest, pc)
				continue
			}
			delete(h.proceed, pc.req)
			see(pc.d, pc.by)
			applyOther(pc.d, pc.name, pc.create)
		}
		parked = rest
	}
	callsOut := func() []Callback { return h.calls }
	// The holders' permits that the table dropped (answered, revoked, gone)
	// are forgotten by the model: a permit the table no longer has is not
	// held.
	sync := func() {
		for k, mp := range held {
			if !mp.pending && mp.reclaimed && !h.p.Holds(ClientID(k[0]), dirID(k[1]), mp.id) {
				forget(ClientID(k[0]), k[1])
			}
		}
	}
	for step := 0; step < 300; step++ {
		c := ClientID(1 + r.IntN(nClients))
		d := r.IntN(nDirs)
		key := [2]int{int(c), d}
		switch k := r.IntN(12); {
		case k == 0: // GET_PERMIT
			if held[key] != nil || len(graceLeft) > 0 {
				continue
			}
			id, fresh, ok := h.p.Acquire(h.now, c, dirID(d), nil)
			if !ok || !fresh {
				continue
			}
			local := map[int]bool{}
			for n, v := range server[d] {
				local[n] = v
			}
			held[key] = &modelPermit{id: id, pending: true, local: local, reclaimed: true}
			trace = append(trace, fmt.Sprintf("acquire c%d d%d", c, d))
		case k == 1: // the grant's breaks end
			if mp := held[key]; mp != nil && mp.pending {
				if h.p.Granted(h.now, dirID(d), mp.id) {
					mp.pending = false
					// The view is the server's when granted: a change since
					// the Acquire cancelled it.
					for n := range mp.local {
						delete(mp.local, n)
					}
					for n, v := range server[d] {
						mp.local[n] = v
					}
					trace = append(trace, fmt.Sprintf("granted c%d d%d", c, d))
				} else {
					delete(held, key)
					trace = append(trace, fmt.Sprintf("cancelled c%d d%d", c, d))
				}
			}
		case k <= 4: // the holder's application changes the directory (logged)
			mp := held[key]
			if mp == nil || mp.pending || !mp.reclaimed || !h.p.Holds(c, dirID(d), mp.id) || recalled(h, c, dirID(d)) {
				continue
			}
			n := r.IntN(nNames)
			e := cmlEntry{name: n, create: !mp.local[n]}
			mp.local[n] = e.create
			mp.log = append(mp.log, e)
			trace = append(trace, fmt.Sprintf("log c%d d%d %+v", c, d, e))
		case k <= 6: // another client's change (or a plain client's: 9)
			by := c
			if r.IntN(3) == 0 {
				by = 9
			}
			if mp := held[[2]int{int(by), d}]; mp != nil && !mp.pending {
				continue // the holder logs its changes instead
			}
			if len(graceLeft) > 0 {
				continue // the grace period's gate: JUKEBOX, tried again later
			}
			n, create := r.IntN(nNames), r.IntN(2) == 0
			req := nextReq
			nextReq++
			v, acts := h.p.Changed(h.now, req, by, true, []FileID{dirID(d)})
			h.absorb(acts)
			trace = append(trace, fmt.Sprintf("change by c%d d%d n%d create=%v: %v", by, d, n, create, v))
			if v == Proceed {
				see(d, by)
				applyOther(d, n, create)
				continue
			}
			parked = append(parked, parkedChange{req: req, by: by, d: d, name: n, create: create})
		case k == 7 && withLocal: // a local process's change: made, recalls at once
			n, create := r.IntN(nNames), r.IntN(2) == 0
			_, acts := h.p.Changed(h.now, 0, 0, false, []FileID{dirID(d)})
			h.absorb(acts)
			server[d][n] = create
			delete(due[d], n)
			trace = append(trace, fmt.Sprintf("local change d%d n%d create=%v", d, n, create))
		case k == 8: // a recall is delivered: reintegrate, then answer (or fail)
			calls := callsOut()
			if len(calls) == 0 {
				continue
			}
			i := r.IntN(len(calls))
			cb := calls[i]
			h.calls = append(calls[:i:i], calls[i+1:]...)
			dd := dirOf(cb.File)
			o := OK
			if withDeadline && r.IntN(4) == 0 {
				o = Failed
			} else {
				reintegrate(cb.Client, dd)
			}
			h.absorb(h.p.CallbackDone(h.now, cb, o))
			trace = append(trace, fmt.Sprintf("recall of c%d d%d ended %v", cb.Client, dd, o))
		case k == 9: // the holder reintegrates and releases
			mp := held[key]
			if mp == nil || mp.pending || !mp.reclaimed {
				continue
			}
			reintegrate(c, d)
			h.absorb(h.p.Release(h.now, c, dirID(d), mp.id))
			delete(held, key)
			trace = append(trace, fmt.Sprintf("release c%d d%d", c, d))
		case k == 10 && r.IntN(8) == 0: // the server restarts
			starts++
			h.p = NewPermits(PermitConfig{MaxPerClient: 2, MaxPermits: 3, CallbackTimeout: time.Second, IDBase: starts << 32}, h.now)
			h.calls, parked, h.proceed = nil, nil, map[ReqID]bool{}
			for k, mp := range held {
				if mp.pending {
					delete(held, k) // its answer died with the server: never learned of
					continue
				}
				mp.reclaimed = false
				graceLeft[ClientID(k[0])] = true
			}
			trace = append(trace, fmt.Sprintf("server restart %d", starts))
		case k == 10: // a holder reclaims its permits (RECLAIM_PERMIT, then RECLAIM_DONE)
			if !graceLeft[c] {
				continue
			}
			for k, mp := range held {
				if ClientID(k[0]) != c || mp.reclaimed {
					continue
				}
				id := h.p.Reclaim(h.now, c, dirID(k[1]), nil)
				if id == 0 {
					lostLogs[k[1]] += len(mp.log)
					delete(held, k)
					trace = append(trace, fmt.Sprintf("reclaim c%d d%d refused", c, k[1]))
					continue
				}
				mp.id, mp.reclaimed = id, true
				trace = append(trace, fmt.Sprintf("reclaim c%d d%d: %d", c, k[1], id))
			}
			delete(graceLeft, c)
		default:
			if withDeadline {
				h.now = h.now.Add(time.Duration(r.IntN(700)) * time.Millisecond)
				h.absorb(h.p.Tick(h.now))
			} else if r.IntN(20) == 0 {
				h.absorb(h.p.ClientGone(h.now, c))
				gone = true
				// Its registration is gone: the grace period waits no more
				// for it, and what it had not reclaimed is lost with it.
				delete(graceLeft, c)
				for k, mp := range held {
					if ClientID(k[0]) == c && !mp.reclaimed {
						refused += len(mp.log)
						delete(held, k)
					}
				}
				trace = append(trace, fmt.Sprintf("client c%d gone", c))
			}
		}
		sync()
		runProceeds()
	}
	// Drain: every recall is answered, every parked change made.
	for len(h.calls) > 0 {
		cb := h.calls[0]
		h.calls = h.calls[1:]
		reintegrate(cb.Client, dirOf(cb.File))
		h.absorb(h.p.CallbackDone(h.now, cb, OK))
		sync()
		runProceeds()
	}
	if len(parked) != 0 {
		reqs := make([]int, 0, len(parked))
		for _, p := range parked {
			reqs = append(reqs, int(p.req))
		}
		sort.Ints(reqs)
		fail("changes still parked with no recall out: %v", reqs)
	}
	if !withLocal && conflicts != 0 {
		fail("%d records found their name changed meanwhile, without local processes", conflicts)
	}
	if !withDeadline && !gone && refused != 0 {
		fail("%d records refused without deadlines or clients gone", refused)
	}
}

// recalled reports whether c's permit on dir has a recall out (the holder
// then logs nothing more there).
func recalled(h *permitHarness, c ClientID, dir FileID) bool {
	for _, cb := range h.calls {
		if cb.Client == c && cb.File == dir {
			return true
		}
	}
	return false
}
