package state

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestDirsModel drives Dirs with seeded random interleavings of listings,
// changes, answers, releases, timeouts and clients going away, against a
// model of the clients' caches, and checks the promise's meaning: when a
// change is answered, no other client still caches (under a promise it has
// not been told is broken) a listing older than that change, unless its
// break timed out (its lease lapsed: it stopped using the cache by then).
func TestDirsModel(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		dirsModelRun(t, seed)
	}
}

type modelCache struct {
	ver   map[FileID]uint64 // the version of each object the listing read
	valid bool
}

func dirsModelRun(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	const nClients, nDirs, nObjs = 3, 3, 6
	h := newDirHarness(t, DirConfig{MaxPerClient: 2, MaxListed: 4, CallbackTimeout: time.Second})
	ver := map[FileID]uint64{} // the current version of every directory and object
	// objects listed in each directory (fixed membership; a directory's own
	// version stands for its entries)
	members := func(d int) []FileID { return []FileID{fid(10 + 2*d), fid(11 + 2*d)} }
	dirID := func(d int) FileID { return fid(100 + d) }
	cache := map[[2]int]*modelCache{} // (client, dir) -> what the client caches
	type listing struct {
		c, d int
		tok  uint64
		read map[FileID]uint64 // nil until read
	}
	var lists []*listing
	type pending struct {
		by     ClientID
		d      []int
		cutoff map[[2]int]bool // clients that must be told before the answer
	}
	parked := map[ReqID]bool{}
	nextReq := ReqID(1)
	deliver := func(cb Callback) { // the client drops its cache as it answers
		for d := 0; d < nDirs; d++ {
			if dirID(d) == cb.File {
				if mc := cache[[2]int{int(cb.Client), d}]; mc != nil {
					mc.valid = false
				}
			}
		}
	}
	// produced[req]: the versions a parked change made, and who made it.
	type change struct {
		by  ClientID
		ver map[FileID]uint64
	}
	produced := map[ReqID]change{}
	// answered checks a change as it is answered: no other client still
	// caches, as valid, a version older than the one it made.
	answered := func(req ReqID) {
		ch := produced[req]
		for k, mc := range cache {
			if !mc.valid || ClientID(k[0]) == ch.by {
				continue
			}
			for f, v := range ch.ver {
				if cv, ok := mc.ver[f]; ok && cv < v {
					t.Fatalf("seed %d: change %d answered while client %d caches %x at version %d < %d", seed, req, k[0], f[8:], cv, v)
				}
			}
		}
		delete(produced, req)
	}
	check := func(string) {
		for req := range parked {
			if h.proceed[req] {
				answered(req)
				delete(parked, req)
			}
		}
	}
	for step := 0; step < 200; step++ {
		switch op := r.IntN(10); {
		case op < 2: // begin a listing
			c, d := 1+r.IntN(nClients), r.IntN(nDirs)
			tok, ok := h.d.BeginList(h.now, ClientID(c), dirID(d), []byte{byte(d)})
			if ok {
				lists = append(lists, &listing{c: c, d: d, tok: tok})
			}
		case op < 3 && len(lists) > 0: // a listing reads, or ends
			i := r.IntN(len(lists))
			l := lists[i]
			if l.read == nil {
				l.read = map[FileID]uint64{dirID(l.d): ver[dirID(l.d)]}
				for _, f := range members(l.d) {
					l.read[f] = ver[f]
				}
				continue
			}
			lists = append(lists[:i], lists[i+1:]...)
			got, acts := h.d.EndList(h.now, l.tok, members(l.d))
			h.absorb(acts)
			if got {
				cache[[2]int{l.c, l.d}] = &modelCache{ver: l.read, valid: true}
			}
		case op < 6: // a change through the server (or a local one: req 0)
			by := ClientID(1 + r.IntN(nClients+1)) // nClients+1: a plain client
			var objs []FileID
			d := r.IntN(nDirs)
			if r.IntN(2) == 0 {
				objs = append(objs, dirID(d))
			} else {
				objs = append(objs, members(d)[r.IntN(2)])
			}
			for _, f := range objs {
				ver[f]++
			}
			// The changer's own cache is updated from its reply.
			if mc := cache[[2]int{int(by), d}]; mc != nil && mc.valid {
				for _, f := range objs {
					if _, ok := mc.ver[f]; ok {
						mc.ver[f] = ver[f]
					}
				}
			}
			req := nextReq
			nextReq++
			local := r.IntN(5) == 0
			if local {
				req, by = 0, 0
			}
			v, acts := h.d.Changed(h.now, req, by, !local, objs)
			h.absorb(acts)
			if v == Wait {
				parked[req] = true
				pv := map[FileID]uint64{}
				for _, f := range objs {
					pv[f] = ver[f]
				}
				produced[req] = change{by: by, ver: pv}
			} else if req != 0 {
				produced[req] = change{by: by, ver: map[FileID]uint64{}}
				for _, f := range objs {
					produced[req].ver[f] = ver[f]
				}
				answered(req) // answered at once: nobody may cache it
			}
		case op < 8 && len(h.calls) > 0: // a client answers a break
			i := r.IntN(len(h.calls))
			cb := h.calls[i]
			h.calls = append(h.calls[:i], h.calls[i+1:]...)
			deliver(cb)
			h.absorb(h.d.CallbackDone(h.now, cb, OK))
		case op < 9: // time passes: breaks time out (their clients' leases lapse)
			h.now = h.now.Add(time.Duration(r.IntN(600)) * time.Millisecond)
			before := len(h.timedOut)
			acts := h.d.Tick(h.now)
			// A break past its deadline: the client's lease lapsed by then
			// (docs/protocol.md 20.4), and it stopped using its cache.
			for _, a := range acts {
				if a.Kind == ActFence {
					h.timedOut = append(h.timedOut, a.Client)
				}
			}
			for _, c := range h.timedOut[before:] {
				for k, mc := range cache {
					if ClientID(k[0]) == c {
						mc.valid = false
					}
				}
			}
			h.timedOut = h.timedOut[:before]
			h.absorb(acts)
			// drop the callbacks of timed-out promises from the list
			kept := h.calls[:0]
			for _, cb := range h.calls {
				if h.d.promiseOf0(cb) {
					kept = append(kept, cb)
				}
			}
			h.calls = kept
		default: // a release
			c, d := 1+r.IntN(nClients), r.IntN(nDirs)
			if mc := cache[[2]int{c, d}]; mc != nil {
				mc.valid = false
			}
			h.d.Release(h.now, ClientID(c), dirID(d))
		}
		check("step")
	}
	// Drain: answer every break; every parked change is answered.
	for len(h.calls) > 0 {
		cb := h.calls[0]
		h.calls = h.calls[1:]
		deliver(cb)
		h.absorb(h.d.CallbackDone(h.now, cb, OK))
	}
	check("drain")
	if len(parked) != 0 {
		t.Fatalf("seed %d: %d changes never answered", seed, len(parked))
	}
}
