package tests

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/state"
)

// TestSNFSPermitRecallDeadlineWaitsForBatch: a permit whose recall passes its
// deadline while its holder's REINTEGRATE waits for a third client's slow
// callback ends only when that batch has been applied (docs/protocol.md
// section 21.4): every record of the batch is applied under the permit, and
// the change held back by the recall is made after them - the plain
// client's GUARDED CREATE of a name the batch created fails EXIST. Before,
// the deadline revoked the permit in the middle of the batch: the plain
// CREATE went first and the holder's records after the waiting one were
// refused SNFS_ERR_NOPERMIT.
func TestSNFSPermitRecallDeadlineWaitsForBatch(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const timeout = time.Second
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Table.CallbackTimeout = timeout })
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	D := e.lookup(e.root, "d")
	// The third client caches f for writing and answers its callback past
	// its deadline: the holder's UNLINK of f waits for it that long.
	cacher := newDirBreaks()
	cacher.delay = 3 * timeout
	c := dialSNFS(t, e, "permit-slow-third", cacher)
	cacheForWrite(t, c, D, "f") // once C's callback path is verified and it may cache
	// The holder answers its recall after a delay, by a batch whose first
	// record waits for C: the recall's deadline passes during the wait.
	h := newPermitHolder()
	h.delay = 600 * time.Millisecond
	a := dialSNFS(t, e, "permit-slow-holder", h)
	p := getPermit(t, a, D)
	h.mu.Lock()
	h.s, h.permit = a, p
	h.log = []snfs1.CMLRecord{
		{LSN: 1, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
		createRec(2, snfs1.ObjRef{FH: D}, "g", 1),
	}
	h.mu.Unlock()
	mode := uint32(0o644)
	start := time.Now()
	r, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "g"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	took := time.Since(start)
	var results []snfs1.CMLResult
	var herr error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		results, herr = h.results, h.err
		h.mu.Unlock()
		if herr != nil || len(results) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(results) != 2 {
		t.Errorf("the holder's batch answered %d records, want 2", len(results))
	}
	if herr != nil {
		t.Fatalf("the holder's REINTEGRATE: %v", herr)
	}
	for _, res := range results {
		if res.Status != nfs3.OK {
			t.Errorf("record %d: %v (the permit ended in the middle of its batch)", res.LSN, res.Status)
		}
	}
	want(t, "plain CREATE of the name the holder's batch created", r.Status, err, nfs3.ErrExist)
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[g]" {
		t.Fatalf("the directory holds %s", got)
	}
	if st := e.srv.PermitStats(); st.Revocations != 1 || st.Permits != 0 {
		t.Fatalf("stats %+v (the recall passed its deadline: a revocation, carried out at the batch's end)", st)
	}
	t.Logf("plain CREATE answered %v after it was sent (callback deadline %v)", took, timeout)
}

// setPendingLSNPre is setPendingLSN with the batch's pre-image: the object
// each name held before the batch (nil: none).
func setPendingLSNPre(t *testing.T, e *env, last, pending uint64, pre map[uint64]nfs3.FH) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(e.stateDir, "consist.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("cml"))
		var name []byte
		b.ForEach(func(k, _ []byte) error { name = append([]byte(nil), k...); return nil })
		if name == nil {
			return fmt.Errorf("no LSN record")
		}
		v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, last), pending)
		for k, fh := range pre {
			var id state.FileID
			if fh != nil {
				id = state.FileIDOf(fh)
			}
			v = append(binary.BigEndian.AppendUint64(v, k), id[:]...)
		}
		return b.Put(name, v)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSNFSPermitCrashMidBatchNameRemade: a batch that moves a name away and
// makes it again (RENAME c->d, CREATE c, RENAME a->b, CREATE a), interrupted
// by a crash after its first two records: at the resend, the check finds the
// prefix applied by the objects the names hold against the batch's
// pre-image - c holds a new object and d the old c: applied; a still holds
// the old a: not applied - and applies the last two. The check by effect
// from the end took CREATE a's name as its effect, answered all four, and
// lost the RENAME a->b (found by TestCMLModel, seed 1).
func TestSNFSPermitCrashMidBatchNameRemade(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-crash-remade")
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "a", 1), createRec(2, snfs1.ObjRef{FH: D}, "c", 2)})
	if err != nil || res.Failed() != nil || res.Applied != 2 {
		t.Fatalf("%v %+v", err, res)
	}
	A, C := e.lookup(D, "a"), e.lookup(D, "c")
	key := func(name string) uint64 { return consist.PreKey(state.FileIDOf(D), name) }
	addr := e.addr
	e.stop()
	// The crash: RENAME c->d and CREATE c applied, then the server died.
	if err := os.Rename(e.path("d/c"), e.path("d/d")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("d/c"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	setPendingLSNPre(t, e, 2, 6, map[uint64]nfs3.FH{key("a"): A, key("b"): nil, key("c"): C, key("d"): nil})
	e.start(addr)
	p = getPermit(t, a, D)
	res, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		{LSN: 3, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "c", ToDir: snfs1.ObjRef{FH: D}, ToName: "d"},
		createRec(4, snfs1.ObjRef{FH: D}, "c", 3),
		{LSN: 5, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "a", ToDir: snfs1.ObjRef{FH: D}, ToName: "b"},
		createRec(6, snfs1.ObjRef{FH: D}, "a", 4),
	})
	if err != nil || res.Failed() != nil || res.Applied != 6 {
		t.Fatalf("the batch resent after the crash: %v %+v", err, res)
	}
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[a b c d]" {
		t.Fatalf("the directory holds %s, want [a b c d] (a record taken as applied that was not)", got)
	}
	if !bytes.Equal(e.lookup(D, "b"), A) || !bytes.Equal(e.lookup(D, "d"), C) {
		t.Fatal("b or d does not hold the object renamed to it")
	}
	if bytes.Equal(e.lookup(D, "a"), A) || bytes.Equal(e.lookup(D, "c"), C) {
		t.Fatal("a or c still holds its old object")
	}
}

// TestSNFSPermitPreImageRecorded: while a batch is being applied (its
// second record waits for a third client's callback), the state database
// holds the batch's pending LSN and its pre-image: the object each name the
// batch changes held before it (a for the RENAME's source, none for its
// target and for the CREATE's name, f for the UNLINK's), by consist.PreKey.
// Once the batch is done, only the last applied LSN is left.
func TestSNFSPermitPreImageRecorded(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"d/a", "d/f"} {
		if err := os.WriteFile(e.path(f), []byte("x"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	D := e.lookup(e.root, "d")
	A, F := e.lookup(D, "a"), e.lookup(D, "f")
	cacher := newDirBreaks()
	cacher.delay = 500 * time.Millisecond
	c := dialSNFS(t, e, "permit-pre-cacher", cacher)
	cacheForWrite(t, c, D, "f")
	a := dialSNFS(t, e, "permit-pre-holder", newPermitHolder())
	p := getPermit(t, a, D)
	type result struct {
		res *snfs1.ReintegrateRes
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
			{LSN: 1, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "a", ToDir: snfs1.ObjRef{FH: D}, ToName: "b"},
			{LSN: 2, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
			createRec(3, snfs1.ObjRef{FH: D}, "a", 1),
		})
		done <- result{res, err}
	}()
	// What a crash now would leave: a copy of the state database.
	read := func() (last, pending uint64, pre map[uint64]state.FileID) {
		data, err := os.ReadFile(filepath.Join(e.stateDir, "consist.db"))
		if err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(t.TempDir(), "copy.db")
		if err := os.WriteFile(cp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := bolt.Open(cp, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("cml")).ForEach(func(k, v []byte) error {
				if len(v) >= 16 {
					last, pending = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
					pre = map[uint64]state.FileID{}
					for rest := v[16:]; len(rest) >= 24; rest = rest[24:] {
						pre[binary.BigEndian.Uint64(rest)] = state.FileID(rest[8:24])
					}
				}
				return nil
			})
		})
		return last, pending, pre
	}
	var last, pending uint64
	var pre map[uint64]state.FileID
	for deadline := time.Now().Add(5 * time.Second); pending == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		last, pending, pre = read()
	}
	key := func(name string) uint64 { return consist.PreKey(state.FileIDOf(D), name) }
	want := map[uint64]state.FileID{key("a"): state.FileIDOf(A), key("b"): {}, key("f"): state.FileIDOf(F)}
	if last != 0 || pending != 3 || fmt.Sprint(pre) != fmt.Sprint(want) {
		t.Fatalf("during the batch: last %d pending %d pre-image %v, want 0 3 %v", last, pending, pre, want)
	}
	r := <-done
	if r.err != nil || r.res.Failed() != nil || r.res.Applied != 3 {
		t.Fatalf("%v %+v", r.err, r.res)
	}
	if last, pending, pre = read(); last != 3 || pending != 0 || len(pre) != 0 {
		t.Fatalf("after the batch: last %d pending %d pre-image %v", last, pending, pre)
	}
}

// TestSNFSPermitGroupCommit: on a sync export, a batch of creates is made
// durable by one flush (a group commit, section 21.3) before its reply,
// not by two per record as its CREATEs would each be; a batch of one
// record keeps the flushes of its procedure (the file, then the directory).
func TestSNFSPermitGroupCommit(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash,sync")
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	D := e.lookup(e.root, "d")
	a := dialSNFS(t, e, "permit-group-commit", newPermitHolder())
	p := getPermit(t, a, D)
	var batch []snfs1.CMLRecord
	for i := 1; i <= 8; i++ {
		batch = append(batch, createRec(uint64(i), snfs1.ObjRef{FH: D}, fmt.Sprintf("f%d", i), uint64(i)))
	}
	before := e.srv.GatherStats(e.dir).Fsyncs
	reintegrated(t, a, p, 8, batch)
	if n := e.srv.GatherStats(e.dir).Fsyncs - before; n != 1 {
		t.Fatalf("a batch of 8 creates issued %d flushes, want 1", n)
	}
	before = e.srv.GatherStats(e.dir).Fsyncs
	reintegrated(t, a, p, 9, []snfs1.CMLRecord{createRec(9, snfs1.ObjRef{FH: D}, "g", 1)})
	if n := e.srv.GatherStats(e.dir).Fsyncs - before; n != 2 {
		t.Fatalf("a batch of one create issued %d flushes, want 2 (the file, then its directory)", n)
	}
}

// TestSNFSPermitCrashCheckLimit pins the limit of the check after a crash
// (docs/protocol.md section 21.3, "What the check cannot tell"): a batch
// CREATE a, CREATE b interrupted before either was applied, and a local
// process that makes b before the resend. No prefix of the batch gives the
// names as they are (b holds an object neither the pre-image nor the batch
// explains), so the check falls back to the effect from the last record
// back: CREATE b's name exists, the whole batch is taken as applied, b is
// answered with the local process's object, and a is never made.
func TestSNFSPermitCrashCheckLimit(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-crash-limit")
	reintegrated(t, a, p, 1, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "x", 1)})
	key := func(name string) uint64 { return consist.PreKey(state.FileIDOf(D), name) }
	addr := e.addr
	e.stop()
	setPendingLSNPre(t, e, 1, 3, map[uint64]nfs3.FH{key("a"): nil, key("b"): nil})
	if err := os.WriteFile(e.path("d/b"), []byte("local"), 0o644); err != nil { // the other's change
		t.Fatal(err)
	}
	e.start(addr)
	p = getPermit(t, a, D)
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		createRec(2, snfs1.ObjRef{FH: D}, "a", 1), createRec(3, snfs1.ObjRef{FH: D}, "b", 2)})
	if err != nil || res.Failed() != nil || res.Applied != 3 || len(res.Results) != 2 {
		t.Fatalf("%v %+v", err, res)
	}
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[b x]" {
		t.Fatalf("the directory holds %s; the limit as specified leaves [b x]", got)
	}
	if !bytes.Equal(res.Results[1].Obj, e.lookup(D, "b")) {
		t.Fatal("b not answered with the object its name holds (the local process's)")
	}
}

// TestSNFSPermitCrashWhileWaiting: a real crash in the middle of a batch.
// The batch UNLINK f, RENAME a->b, CREATE a waits at its first record for a
// third client's callback; what a crash then leaves is taken (a copy of
// the state database, with the pending LSN and the pre-image the server
// wrote; the export as it was: nothing applied), the batch is let finish,
// the server stopped, the export and database put back as the crash left
// them, and the server started again. The holder's resend is checked
// against the server's own pre-image: nothing was applied, all three are.
// By effect from the last record back, CREATE a's name (the old a) looked
// applied and the whole batch was answered without being applied.
func TestSNFSPermitCrashWhileWaiting(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Grace = -1 })
	for _, d := range []string{"d", "keep"} {
		if err := os.Mkdir(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"d/a", "d/f"} {
		if err := os.WriteFile(e.path(f), []byte(f), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(e.path("d/f"), e.path("keep/f")); err != nil { // f's inode, to put back
		t.Fatal(err)
	}
	D := e.lookup(e.root, "d")
	A := e.lookup(D, "a")
	cacher := newDirBreaks()
	cacher.delay = time.Second
	c := dialSNFS(t, e, "permit-crash-wait-cacher", cacher)
	cacheForWrite(t, c, D, "f")
	a := dialSNFS(t, e, "permit-crash-wait-holder", newPermitHolder())
	p := getPermit(t, a, D)
	batch := []snfs1.CMLRecord{
		{LSN: 1, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
		{LSN: 2, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "a", ToDir: snfs1.ObjRef{FH: D}, ToName: "b"},
		createRec(3, snfs1.ObjRef{FH: D}, "a", 1),
	}
	done := make(chan error, 1)
	go func() {
		res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
		if err == nil && (res.Failed() != nil || res.Applied != 3) {
			err = fmt.Errorf("%+v", res)
		}
		done <- err
	}()
	dbPath := filepath.Join(e.stateDir, "consist.db")
	var crashDB []byte
	for deadline := time.Now().Add(5 * time.Second); crashDB == nil; time.Sleep(5 * time.Millisecond) {
		data, err := os.ReadFile(dbPath)
		if err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(t.TempDir(), "copy.db")
		if err := os.WriteFile(cp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := bolt.Open(cp, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		db.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("cml")).ForEach(func(_, v []byte) error {
				if len(v) > 16 && binary.BigEndian.Uint64(v[8:]) == 3 {
					crashDB = data
				}
				return nil
			})
		})
		db.Close()
		if crashDB == nil && time.Now().After(deadline) {
			t.Fatal("the batch's pending LSN never recorded")
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("the batch: %v", err)
	}
	addr := e.addr
	e.stop()
	// Put back what the crash left: nothing of the batch applied.
	if err := os.Remove(e.path("d/a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.path("d/b"), e.path("d/a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(e.path("keep/f"), e.path("d/f")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dbPath, crashDB, 0o600); err != nil {
		t.Fatal(err)
	}
	e.start(addr)
	c.Disconnect() // its caching of f is gone with the restart
	p = getPermit(t, a, D)
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil || res.Failed() != nil || res.Applied != 3 {
		t.Fatalf("the batch resent after the crash: %v %+v", err, res)
	}
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[a b]" {
		t.Fatalf("the directory holds %s, want [a b]", got)
	}
	if !bytes.Equal(e.lookup(D, "b"), A) || bytes.Equal(e.lookup(D, "a"), A) {
		t.Fatal("b does not hold the old a, or a is not a new object")
	}
}

// TestSNFSPermitNewPermitHeldByItsBatch: the permit an MKDIR record obtains
// is held, like those the batch names, until the whole batch is applied
// (docs/protocol.md section 21.4, "A batch in progress holds the permit's
// end"). A plain client's CREATE in the new directory, made while a later
// record of the batch waits for a third client's slow callback, recalls
// that permit; its holder cannot answer before it learns of the permit from
// the reply, so the recall passes its deadline during the batch. The plain
// CREATE is made after the batch (EXIST: the batch made the name first),
// every record of the batch is applied, and the reply gives no permit that
// ended meanwhile. Before, the deadline revoked the permit in the middle of
// the batch: the plain CREATE went first, the batch's own CREATE of that
// name failed EXIST, and the reply still gave the revoked permit.
func TestSNFSPermitNewPermitHeldByItsBatch(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const timeout = time.Second
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Table.CallbackTimeout = timeout })
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	D := e.lookup(e.root, "d")
	// The third client caches f for writing and answers its callback past
	// the recall's deadline: the batch's UNLINK of f waits for it that long.
	cacher := newDirBreaks()
	cacher.delay = 10 * timeout // the test's steps below must fit in it on a loaded machine
	c := dialSNFS(t, e, "newpermit-slow-third", cacher)
	cacheForWrite(t, c, D, "f")
	// The holder answers a recall only once the test lets it (after the
	// reply, as a holder that had not learnt of the permit would).
	h := newPermitHolder()
	h.stuck = make(chan struct{})
	t.Cleanup(func() { close(h.stuck) })
	a := dialSNFS(t, e, "newpermit-holder", h)
	p := getPermit(t, a, D)
	mode := uint32(0o755)
	recs := []snfs1.CMLRecord{
		{LSN: 1, Op: snfs1.CMLMkdir, Dir: snfs1.ObjRef{FH: D}, Name: "n", Attr: nfs3.Sattr{Mode: &mode}, New: 1},
		{LSN: 2, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
		createRec(3, snfs1.ObjRef{Prov: 1}, "x", 2),
	}
	type reply struct {
		res *snfs1.ReintegrateRes
		err error
	}
	done := make(chan reply, 1)
	go func() {
		res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, recs)
		done <- reply{res, err}
	}()
	// Once the MKDIR is applied, a plain client creates x in the new
	// directory: that recalls its permit, which the holder cannot answer.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(e.path("d/n")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch's MKDIR was not applied within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	N := lookupBy(t, a.NFS(), D, "n") // the holder's own read: a plain client's would recall d's permit
	fmode := uint32(0o644)
	r, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: N, Name: "x"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &fmode}})
	want(t, "plain CREATE of the name the holder's batch created in the new directory", r.Status, err, nfs3.ErrExist)
	var rep reply
	select {
	case rep = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the REINTEGRATE was not answered within 30 s")
	}
	if rep.err != nil {
		t.Fatalf("REINTEGRATE: %v", rep.err)
	}
	if len(rep.res.Results) != 3 {
		t.Fatalf("the batch answered %d records, want 3", len(rep.res.Results))
	}
	for _, res := range rep.res.Results {
		if res.Status != nfs3.OK {
			t.Errorf("record %d: %v (the new directory's permit ended in the middle of its batch)", res.LSN, res.Status)
		}
	}
	if got := rep.res.Results[0].Permit; got != 0 {
		t.Errorf("the MKDIR's result gives permit %d, which its recall's deadline ended during the batch", got)
	}
	if st := e.srv.PermitStats(); st.Revocations != 1 || st.Permits != 1 {
		t.Errorf("stats %+v, want the new directory's permit revoked at the batch's end and d's still held", st)
	}
}

// TestSNFSPermitBatchWaitsPastJukebox: a REINTEGRATE record that needs a
// third client's callback waits for it as long as it takes within the
// callback deadline, past the bound after which a plain NFSv3 call would
// be answered NFS3ERR_JUKEBOX: the batch is applied whole (before, the
// record was answered JUKEBOX after a second, the batch stopped there and
// its client kept the remove as a conflict).
func TestSNFSPermitBatchWaitsPastJukebox(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const timeout, jukebox = 6 * time.Second, 500 * time.Millisecond
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) {
		c.Table.CallbackTimeout, c.Table.JukeboxAfter = timeout, jukebox
	})
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	D := e.lookup(e.root, "d")
	cacher := newDirBreaks()
	cacher.delay = 4 * jukebox // within the deadline, past the jukebox bound
	c := dialSNFS(t, e, "permit-jukebox-third", cacher)
	cacheForWrite(t, c, D, "f")
	a := dialSNFS(t, e, "permit-jukebox-holder", nil)
	p := getPermit(t, a, D)
	start := time.Now()
	res := reintegrateOpen(t, a, p,
		snfs1.CMLRecord{LSN: 1, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
		createRec(2, snfs1.ObjRef{FH: D}, "g", 1))
	if res.Applied != 2 {
		t.Fatalf("applied %d, want 2", res.Applied)
	}
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[g]" {
		t.Fatalf("the directory holds %s", got)
	}
	t.Logf("the batch took %v (the third client answers after %v)", time.Since(start), cacher.delay)
}

// TestSNFSPermitBatchAtBounds: a REINTEGRATE at the protocol's bounds
// (SNFS_REINTEGRATE_MAX records, here symlinks with 4 KiB targets: over
// 4 MiB on the wire) is within the record size a server must accept
// (docs/protocol.md section 2: 8 MiB) and is applied whole; the server's
// RPC layer used to drop the connection at 4 MiB, and the client sent it
// again and again.
func TestSNFSPermitBatchAtBounds(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	a := dialSNFS(t, e, "permit-at-bounds", nil)
	p := getPermit(t, a, D)
	target := strings.Repeat("t", nfs3.MaxPath-1)
	recs := make([]snfs1.CMLRecord, snfs1.ReintegrateMax)
	for i := range recs {
		recs[i] = snfs1.CMLRecord{LSN: uint64(i + 1), Op: snfs1.CMLSymlink, Dir: snfs1.ObjRef{FH: D},
			Name: fmt.Sprintf("s%04d", i), Target: target, New: uint64(i + 1)}
	}
	res := reintegrateOpen(t, a, p, recs...)
	if res.Applied != uint64(len(recs)) {
		t.Fatalf("applied %d of %d", res.Applied, len(recs))
	}
	if got, err := os.Readlink(e.path(fmt.Sprintf("d/s%04d", len(recs)-1))); err != nil || got != target {
		t.Fatalf("the last symlink: %d bytes, %v", len(got), err)
	}
}
