package lockmgr

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The machine's inputs may come from several goroutines (its mutex); run
// under -race. Every acquisition is taken and every callback answered, so at
// the end, with every client gone, nothing is left.
func TestConcurrentInputs(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := New(Config{MaxPerClient: 64}, now)
	var wg sync.WaitGroup
	var reqMu sync.Mutex
	var next ReqID
	newReq := func() ReqID {
		reqMu.Lock()
		defer reqMu.Unlock()
		next++
		return next
	}
	var carry func(acts []Action)
	carry = func(acts []Action) {
		for _, a := range acts {
			switch {
			case a.Kind == ActBacking && a.Acquire:
				_, more := m.BackingDone(now, a.Req, true)
				carry(more)
			case a.Kind == ActGranted:
				carry(m.GrantDone(now, a.Req, true))
			}
		}
	}
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			c := ClientID(g + 1)
			for range 2000 {
				o := Owner{c, fmt.Sprint(rng.IntN(3))}
				f := FileKey(fmt.Sprint("f", rng.IntN(3)))
				r := RangeOf(uint64(rng.IntN(64)), uint64(rng.IntN(16)))
				switch rng.IntN(5) {
				case 0, 1:
					_, acts := m.Lock(now, LockArgs{Req: newReq(), File: f, Owner: o, Type: Read + LockType(rng.IntN(2)), Range: r, Block: rng.IntN(2) == 0})
					carry(acts)
				case 2:
					_, acts := m.Unlock(now, f, o, r)
					carry(acts)
				case 3:
					m.Test(now, f, o, Write, r)
				default:
					found, acts := m.Cancel(now, CancelArgs{f, o, Write, r})
					_ = found
					carry(acts)
				}
			}
		}()
	}
	wg.Wait()
	for c := ClientID(1); c <= 4; c++ {
		carry(m.ClientGone(now, c))
	}
	if s := m.Stats(); s.Files != 0 || s.Records != 0 || s.Waiters != 0 || len(m.reqs) != 0 || len(m.waiting) != 0 || len(m.count) != 0 {
		t.Fatalf("left behind: %+v, %d requests", s, len(m.reqs))
	}
	if s := m.Stats(); s.WaitersGranted == 0 || s.Blocked == 0 {
		t.Fatalf("no contention: %+v", s)
	}
}
