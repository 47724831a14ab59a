package state

import (
	"fmt"
	"slices"
	"testing"
)

// TestTable1 drives every row of the paper's Table 1 through the machine.
func TestTable1(t *testing.T) {
	rows := Table1Rows()
	if len(rows) < 19 {
		t.Fatalf("%d rows, the paper has 19 lines", len(rows))
	}
	for i, row := range rows {
		t.Run(fmt.Sprintf("%02d_%v_%s", i, row.From, row.When), func(t *testing.T) {
			runRow(t, row)
		})
	}
}

func runRow(t *testing.T, row Row) {
	h := newHarness(t, Config{})
	h.register(1, 2, 3)
	f := fid(1)
	var maxVersion uint64
	do := func(s Step) (ReqID, Result) {
		if s.Close {
			h.close(ClientID(s.Client), f, s.Mode, s.Dirty)
			return 0, Result{}
		}
		return h.open(ClientID(s.Client), f, s.Mode)
	}
	for _, s := range row.Setup {
		req, r := do(s)
		h.answerAll()
		if s.Close {
			continue
		}
		rep := r.Reply
		if r.Verdict == Wait {
			rep = h.reply(req)
		} else if r.Verdict != Proceed {
			t.Fatalf("setup %+v: %v", s, r.Verdict)
		}
		maxVersion = max(maxVersion, rep.Version)
	}
	if got := h.info(f).State; got != row.From {
		t.Fatalf("setup led to %v, want %v", got, row.From)
	}

	req, r := do(row.Event)
	var got []RowCallback
	for _, cb := range h.take() {
		got = append(got, RowCallback{int(cb.Client), cb.Mode})
		h.answer(cb, OK)
	}
	if len(h.calls) != 0 {
		t.Fatalf("answering the callbacks caused more: %+v", h.calls)
	}
	cmp := func(a, b RowCallback) int { return a.Client*16 + int(a.Mode) - b.Client*16 - int(b.Mode) }
	slices.SortFunc(got, cmp)
	want := slices.SortedFunc(slices.Values(row.Callbacks), cmp)
	if !slices.Equal(got, want) {
		t.Errorf("callbacks %+v, want %+v", got, want)
	}
	if !row.Event.Close {
		rep := r.Reply
		switch {
		case r.Verdict == Wait:
			if len(want) == 0 {
				t.Errorf("the open waited with no callback to wait for")
			}
			rep = h.reply(req)
		case r.Verdict != Proceed:
			t.Fatalf("event: %v", r.Verdict)
		case len(want) != 0:
			t.Errorf("the open was answered before its callbacks")
		}
		if rep.CacheEnabled != (row.Caching == CachingEnabled) {
			t.Errorf("cacheEnabled %v, want %v", rep.CacheEnabled, row.Caching)
		}
		if row.NewVersion && rep.Version <= maxVersion {
			t.Errorf("version %d, not above the setup's %d", rep.Version, maxVersion)
		}
		if !row.NewVersion && maxVersion != 0 && rep.Version != maxVersion {
			t.Errorf("version %d changed from %d", rep.Version, maxVersion)
		}
		if row.NewVersion && maxVersion != 0 && rep.OldVersion != maxVersion {
			t.Errorf("oldVersion %d, want the previous version %d", rep.OldVersion, maxVersion)
		}
	}
	fi := h.info(f)
	if fi.State != row.To {
		t.Errorf("state %v, want %v", fi.State, row.To)
	}
	if row.LastWriter != 0 {
		if lw, ok := fi.LastWriter(); !ok || int(lw) != row.LastWriter {
			t.Errorf("last writer %d (%v), want %d", lw, ok, row.LastWriter)
		}
	}
	if fi.Waiting != 0 || fi.Callbacks != 0 {
		t.Errorf("left in flight: %+v", fi)
	}
}
