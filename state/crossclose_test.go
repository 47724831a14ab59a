package state

import (
	"testing"
	"time"
)

// A CB_WRITEBACK lets a caching writer go on writing into its cache while it
// writes back (docs/protocol.md 5.1), so its CB_OK covers what was dirty when
// the callback reached it, not what it wrote after. When the writer CLOSEs
// its last write open with dirty = TRUE while the callback is out (a CLOSE
// sent before the answer, applied before it), CB_OK must leave it the last
// writer: clearing the record on the answer had the next reader's OPEN go on
// without a write-back and read the server's copy without the writer's last
// writes (issue 22 item 3: a mount read a prefix of the other mount's
// rewrite, or an empty file, after a GETATTR had called the writer back).
func TestWritebackCrossedByDirtyClose(t *testing.T) {
	for _, c := range []struct {
		name   string
		access AccessArgs // what calls the writer back with CB_WRITEBACK
	}{
		{"GETATTR", AccessArgs{Client: cP, Kind: AccessGetattr}},
		{"a local read open", AccessArgs{Client: cP, Kind: AccessRead, Local: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, dirty := range []bool{true, false} {
				h := newHarness(t, Config{PlainHold: time.Minute})
				h.register(cX, cY)
				f := fid(1)
				if rep := h.openNow(cX, f, Write); !rep.CacheEnabled {
					t.Fatalf("%+v", rep)
				}
				h.nextReq++
				req := h.nextReq
				a := c.access
				a.File, a.Handle = f, f[:]
				v, acts := h.m.PlainAccess(h.now, req, a)
				h.absorb(acts)
				if v != Wait {
					t.Fatalf("dirty %v: %v of a file a caching writer holds: %v", dirty, a.Kind, v)
				}
				cbs := h.take()
				wantCalls(t, cbs, RowCallback{1, Writeback})
				// The writer's CLOSE crosses its answer.
				h.close(cX, f, Write, dirty)
				h.answer(cbs[0], OK)
				wantFinal(t, h, req, ActProceed)
				fi := h.info(f)
				last := len(fi.Holders) == 1 && fi.Holders[0].Client == cX && fi.Holders[0].Dirty
				if last != dirty || len(fi.Holders) > 1 {
					t.Fatalf("dirty %v: after CB_OK: %+v; want %d still the last writer exactly if its CLOSE said dirty", dirty, fi, cX)
				}
				req, r := h.open(cY, f, Read)
				if !dirty {
					if r.Verdict != Proceed || len(h.calls) != 0 {
						t.Fatalf("clean CLOSE: the reader's OPEN: %+v, calls %+v; want an answer at once", r, h.calls)
					}
					continue
				}
				if r.Verdict != Wait {
					t.Fatalf("the reader's OPEN went on (%+v) while %d may hold dirty blocks", r, cX)
				}
				cbs = h.take()
				wantCalls(t, cbs, RowCallback{1, Writeback})
				h.answer(cbs[0], OK) // no open left: this answer clears the record
				if rep := h.reply(req); !rep.CacheEnabled {
					t.Fatalf("the reader's OPEN after the write-back: %+v", rep)
				}
				if fi := h.info(f); len(fi.Holders) != 1 || fi.Holders[0].Client != cY || fi.Holders[0].Dirty {
					t.Fatalf("after the second write-back: %+v; want the reader alone", fi)
				}
			}
		})
	}
}
