package state

import (
	"testing"
	"time"
)

// A file a REINTEGRATE creates is recorded as its creator's closed dirty
// cache (docs/protocol.md section 21.3; consist.Driver.Created): the OPEN
// for writing with caching and the dirty CLOSE the table knows. A reader's
// OPEN then waits for the creator's write-back (Table 1, CLOSED_DIRTY); a
// creator with nothing left to write answers CB_OK, which ends the record;
// the next OPEN calls nobody back.
func TestCreatedFileClosedDirtyHolder(t *testing.T) {
	h := newHarness(t, Config{PlainHold: time.Minute})
	h.register(cX, cY)
	f := fid(1)
	if rep := h.openNow(cX, f, Write); !rep.CacheEnabled {
		t.Fatalf("the creator's OPEN: %+v", rep)
	}
	h.close(cX, f, Write, true)
	fi := h.info(f)
	if len(fi.Holders) != 1 || fi.Holders[0].Client != cX || !fi.Holders[0].Dirty {
		t.Fatalf("after the dirty CLOSE: %+v; want %d the closed dirty holder", fi, cX)
	}
	req, r := h.open(cY, f, Read)
	if r.Verdict != Wait {
		t.Fatalf("a reader's OPEN of the created file: %+v; want it to wait for the creator", r)
	}
	cbs := h.take()
	wantCalls(t, cbs, RowCallback{int(cX), Writeback})
	h.answer(cbs[0], OK)
	if rep := h.reply(req); rep.Version == 0 {
		t.Fatalf("the reader's OPEN after the write-back: %+v", rep)
	}
	h.close(cY, f, Read, false)
	if _, r := h.open(cY, f, Write); r.Verdict != Proceed || len(h.take()) != 0 {
		t.Fatalf("an OPEN after the creator wrote back: %+v; want an answer at once", r)
	}
}
