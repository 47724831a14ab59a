package tests

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/state"
)

// snfsCreate makes a file with the plain client, failing t (not the env's test:
// subtests must fail themselves).
func snfsCreate(t *testing.T, e *env, name string) nfs3.FH {
	t.Helper()
	mode := uint32(0o644)
	res, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: name}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	ok(t, "CREATE "+name, res.Status, err)
	return res.Object
}

// openJukeboxRetry OPENs fh until the answer is not NFS3ERR_JUKEBOX or cx ends; it
// returns the reply and how many JUKEBOX answers came first. It never fails the
// test itself, so any goroutine may call it.
func (p *protoClient) openJukeboxRetry(cx context.Context, fh nfs3.FH, mode state.Mode) (*snfs1.OpenRes, int, error) {
	jukeboxes := 0
	for {
		p.mu.Lock()
		id := p.id
		p.mu.Unlock()
		var res snfs1.OpenRes
		err := p.rpc.Call(cx, snfs1.ProcOpen, &snfs1.OpenArgs{Client: id, File: fh, Mode: mode}, &res)
		if err != nil {
			return nil, jukeboxes, err
		}
		if res.Status != nfs3.ErrJukebox {
			if res.Status != nfs3.OK {
				return &res, jukeboxes, fmt.Errorf("OPEN: %v", snfs1.StatusName(res.Status))
			}
			return &res, jukeboxes, nil
		}
		jukeboxes++
		select {
		case <-cx.Done():
			return nil, jukeboxes, fmt.Errorf("OPEN still answered NFS3ERR_JUKEBOX after %d tries: %w", jukeboxes, cx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openOrFatal is openJukeboxRetry bounded by 30 s, failing t on any error.
func (p *protoClient) openOrFatal(t *testing.T, fh nfs3.FH, mode state.Mode) *snfs1.OpenRes {
	t.Helper()
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, _, err := p.openJukeboxRetry(cx, fh, mode)
	if err != nil {
		t.Fatalf("OPEN %v: %v", mode, err)
	}
	return res
}

// verified registers a protocol client and makes sure its callback path is
// verified before it is used: caching is granted only once the server's CB_NULL
// probe (sent after REGISTER) was answered, and Table 1 assumes verified clients.
func verifiedProtoClient(t *testing.T, e *env, name string) *protoClient {
	t.Helper()
	p := newProtoClient(t, e, name)
	scratch := snfsCreate(t, e, name+"-scratch")
	p.openCaching(scratch, state.Read)
	p.close(scratch, state.Read, false)
	return p
}

func table1WireMode(m state.Mode) state.Mode {
	if m == state.Write {
		return state.Write
	}
	return state.Read
}

func sortRowCallbacks(cbs []state.RowCallback) []state.RowCallback {
	return slices.SortedFunc(slices.Values(cbs), func(a, b state.RowCallback) int {
		if a.Client != b.Client {
			return a.Client - b.Client
		}
		return int(a.Mode) - int(b.Mode)
	})
}

// table1Model is a reference copy of the state table, driven by the same steps
// as the server with every probe and callback answered OK at once. The server
// has no accessor to its table, so the state a row leads to is checked by
// behaviour: a further OPEN for writing by a new client calls back exactly the
// clients the state says cache or may be dirty, and is granted caching exactly
// when the state allows it; the model says what to expect.
type table1Model struct {
	t       *testing.T
	m       *state.Machine
	now     time.Time
	req     state.ReqID
	calls   []state.Callback
	replies map[state.ReqID]state.OpenReply
	file    state.FileID
}

func newTable1Model(t *testing.T, cfg state.Config, clients int) *table1Model {
	cfg.VersionBlock = 1 << 16
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	md := &table1Model{t: t, m: state.New(cfg, now), now: now, replies: map[state.ReqID]state.OpenReply{}, file: state.FileIDOf([]byte("row"))}
	md.absorb(md.m.VersionsReserved(now, cfg.VersionBlock, nil))
	for c := 1; c <= clients; c++ {
		md.absorb(md.m.Register(now, state.ClientID(c)))
	}
	return md
}

func (md *table1Model) absorb(acts []state.Action) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case state.ActCallback:
			md.calls = append(md.calls, a.Callback)
		case state.ActProbe:
			md.m.CallbackPathVerified(md.now, a.Client, true)
		case state.ActReply:
			md.replies[a.Req] = a.Reply
		case state.ActReserveVersions:
			acts = append(acts, md.m.VersionsReserved(md.now, a.Through, nil)...)
		case state.ActLease:
			// Leases are the driver's (local processes); Table 1 has none.
		default:
			md.t.Fatalf("model: unexpected action %+v", a)
		}
	}
}

// do applies s and answers every callback it causes OK; for an OPEN it returns
// the reply.
func (md *table1Model) do(s state.Step) (state.OpenReply, []state.RowCallback) {
	md.t.Helper()
	var r state.Result
	md.req++
	req := md.req
	if s.Close {
		md.absorb(md.m.Close(md.now, state.CloseArgs{File: md.file, Client: state.ClientID(s.Client), Mode: s.Mode, Dirty: s.Dirty}))
	} else {
		var acts []state.Action
		r, acts = md.m.Open(md.now, req, state.OpenArgs{File: md.file, Handle: md.file[:], Client: state.ClientID(s.Client), Mode: s.Mode})
		md.absorb(acts)
	}
	var cbs []state.RowCallback
	for len(md.calls) > 0 {
		cs := md.calls
		md.calls = nil
		for _, cb := range cs {
			cbs = append(cbs, state.RowCallback{Client: int(cb.Client), Mode: cb.Mode})
			md.absorb(md.m.CallbackDone(md.now, cb, state.OK))
		}
	}
	if s.Close {
		return state.OpenReply{}, cbs
	}
	switch r.Verdict {
	case state.Proceed:
		return r.Reply, cbs
	case state.Wait:
		rep, ok := md.replies[req]
		if !ok {
			md.t.Fatalf("model: OPEN %+v never answered", s)
		}
		return rep, cbs
	}
	md.t.Fatalf("model: OPEN %+v: %v", s, r.Verdict)
	return state.OpenReply{}, nil
}

// TestSNFSTable1 drives every row of the paper's Table 1 (state.Table1Rows)
// through real protocol clients on loopback against the real server: one client
// (its own connection and registration, callback path verified) per client
// number in the row, a fresh file per row. It checks the event OPEN's
// cacheEnabled and versions against the row, the callbacks each client got
// against the row's (the set-up's against the reference model), and the state
// the row leads to by behaviour: a probe OPEN for writing by one more client
// must call back, and be granted caching, as the reference table says.
//
// RecallBackoff is long (a minute) so that the back-off is the same in the
// server (real time) and the model (frozen time) however slow the machine: no
// row's event follows a recall of its file in the set-up (only the
// WRITE_SHARED final-close row's set-up recalls, and its event is a CLOSE), and
// the event's own recall is exempt, so the rows' expectations are not affected;
// only the probe after a recall sees it, in both. Callbacks get 20 s and parked
// OPENs 10 s before NFS3ERR_JUKEBOX (retried anyway) so a loaded machine does
// not fence anyone.
func TestSNFSTable1(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	tc := state.Config{RecallBackoff: time.Minute, CallbackTimeout: 20 * time.Second, JukeboxAfter: 10 * time.Second}
	e.restartWith(func(c *server.Config) { c.Table = tc })
	rows := state.Table1Rows()
	if len(rows) < 19 {
		t.Fatalf("%d rows, the paper has 19 lines", len(rows))
	}
	for i, row := range rows {
		t.Run(fmt.Sprintf("%02d_%v_%s", i, row.From, row.When), func(t *testing.T) {
			runTable1Row(t, e, tc, i, row)
		})
	}
}

func runTable1Row(t *testing.T, e *env, tc state.Config, i int, row state.Row) {
	n := row.Event.Client
	for _, s := range row.Setup {
		n = max(n, s.Client)
	}
	for _, cb := range row.Callbacks {
		n = max(n, cb.Client)
	}
	probe := n + 1
	clients := make([]*protoClient, probe+1)
	for c := 1; c <= probe; c++ {
		clients[c] = verifiedProtoClient(t, e, fmt.Sprintf("t1-%02d-c%d", i, c))
	}
	fh := snfsCreate(t, e, fmt.Sprintf("t1-%02d", i))
	md := newTable1Model(t, tc, probe)

	seen := make([]int, probe+1) // callbacks of each client already looked at
	newCallbacks := func() []state.RowCallback {
		var out []state.RowCallback
		for c := 1; c <= probe; c++ {
			got := clients[c].got()
			for _, cb := range got[seen[c]:] {
				if !bytes.Equal(cb.File, fh) {
					t.Errorf("client %d called back for another file: %x", c, cb.File)
				}
				out = append(out, state.RowCallback{Client: c, Mode: state.CallbackMode(cb.Mode)})
			}
			seen[c] = len(got)
		}
		return sortRowCallbacks(out)
	}
	do := func(s state.Step) *snfs1.OpenRes {
		t.Helper()
		p := clients[s.Client]
		if s.Close {
			p.close(fh, table1WireMode(s.Mode), s.Dirty)
			return nil
		}
		return p.openOrFatal(t, fh, table1WireMode(s.Mode))
	}

	var maxVersion uint64
	for _, s := range row.Setup {
		res := do(s)
		_, wantCBs := md.do(s)
		if got := newCallbacks(); !slices.Equal(got, sortRowCallbacks(wantCBs)) {
			t.Fatalf("set-up step %+v: callbacks %+v, the reference table says %+v", s, got, wantCBs)
		}
		if res != nil {
			maxVersion = max(maxVersion, res.CacheVersion)
		}
	}

	res := do(row.Event)
	md.do(row.Event)
	if fi, _ := md.m.Lookup(md.now, md.file); fi.State != row.To {
		t.Fatalf("the reference table went to %v, the row says %v", fi.State, row.To)
	}
	if got, want := newCallbacks(), sortRowCallbacks(row.Callbacks); !slices.Equal(got, want) {
		t.Errorf("event %+v: callbacks %+v, want %+v", row.Event, got, want)
	}
	if row.Event.Close {
		if row.Caching != state.CachingNotAffected {
			t.Fatalf("a CLOSE row with caching %v", row.Caching)
		}
	} else {
		if res.CacheEnabled != (row.Caching == state.CachingEnabled) {
			t.Errorf("cacheEnabled %v, want %v", res.CacheEnabled, row.Caching)
		}
		if row.NewVersion && res.CacheVersion <= maxVersion {
			t.Errorf("version %d, not above the set-up's %d", res.CacheVersion, maxVersion)
		}
		if row.NewVersion && maxVersion != 0 && res.OldCacheVersion != maxVersion {
			t.Errorf("old version %d, want the previous version %d", res.OldCacheVersion, maxVersion)
		}
		if !row.NewVersion && maxVersion != 0 && (res.CacheVersion != maxVersion || res.OldCacheVersion != maxVersion) {
			t.Errorf("versions %d/%d, want %d twice", res.CacheVersion, res.OldCacheVersion, maxVersion)
		}
		if res.Attr == nil {
			t.Errorf("OPEN without attributes")
		}
	}

	// The state the row led to, by behaviour.
	ps := state.Step{Client: probe, Mode: state.Write}
	pres := do(ps)
	wantRep, wantCBs := md.do(ps)
	got := newCallbacks()
	t.Logf("probe OPEN for writing by client %d after the row: callbacks %+v, cacheEnabled %v", probe, got, pres.CacheEnabled)
	if !slices.Equal(got, sortRowCallbacks(wantCBs)) {
		t.Errorf("probe OPEN for writing after the row (to %v, last writer %d): callbacks %+v, the reference table says %+v",
			row.To, row.LastWriter, got, sortRowCallbacks(wantCBs))
	}
	if pres.CacheEnabled != wantRep.CacheEnabled {
		t.Errorf("probe OPEN for writing after the row (to %v): cacheEnabled %v, the reference table says %v",
			row.To, pres.CacheEnabled, wantRep.CacheEnabled)
	}
	if res != nil {
		maxVersion = max(maxVersion, res.CacheVersion)
	}
	if pres.CacheVersion <= maxVersion {
		t.Errorf("probe OPEN for writing: version %d is not fresh", pres.CacheVersion)
	}
}
