package cachemgr

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/client"
	"snfs/mount/cml"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// permitsMount opens an snfs-mode FS with write-back permits on s, with a
// directory d made in the export first; it returns the FS, its manager and
// d's inode.
func permitsMount(t *testing.T, s *restartableServer, name string) (*vfs.FS, *snfsFS, *vfs.Inode) {
	t.Helper()
	return permitsMountData(t, s, name, false)
}

// permitsMountData is permitsMount with files made locally keeping their
// data locally when data is set (SNFSMountConfig.PermitData).
func permitsMountData(t *testing.T, s *restartableServer, name string, data bool) (*vfs.FS, *snfsFS, *vfs.Inode) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: s.addr, Export: s.export, Name: name,
		CacheDir: t.TempDir(), WriteBackDelay: time.Hour, Permits: true, PermitData: data,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Sync(ctx); err != nil {
			t.Error(err)
		}
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	e, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "d")
	if err != nil {
		t.Fatal(err)
	}
	return v, mgrOf(v), e.Inode
}

// holdPermit gets d's permit for sn (the first asks are refused while the
// server probes the callback path).
func holdPermit(t *testing.T, sn *snfsFS, d *vfs.Inode) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := sn.permits.get(context.Background(), d.FH, true); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("GET_PERMIT never granted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logCreates logs n CREATEs in d, named prefix0..., as the mount logs its
// changes under the permit.
func logCreates(t *testing.T, sn *snfsFS, d *vfs.Inode, prefix string, n int) {
	t.Helper()
	mode := uint32(0o644)
	for k := range n {
		rec := snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: snfs1.ObjRef{FH: d.FH}, Name: fmt.Sprintf("%s%d", prefix, k), Attr: nfs3.Sattr{Mode: &mode}}
		if _, err := sn.permits.log.AppendLazy(rec); err != nil {
			t.Fatal(err)
		}
	}
}

// serverBase is name's base in d as the server holds it now (LOOKUP): what
// the mount gives with a record that changes it (permitlost.go).
func serverBase(t *testing.T, sn *snfsFS, d *vfs.Inode, name string) cml.Base {
	t.Helper()
	ctx := context.Background()
	res, err := sn.FS.Client(sessionCred()).Lookup(ctx, d.FH, name)
	if err != nil {
		t.Fatalf("LOOKUP %s: %v", name, err)
	}
	return cml.Base{Dir: d.FH, Name: name, FH: res.Object}
}

// serverFileBase makes name in the export's d (dir) as a process on the
// server would, and returns its base as the mount sees it (serverBase).
func serverFileBase(t *testing.T, dir string, sn *snfsFS, d *vfs.Inode, name string) cml.Base {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
		t.Fatal(err)
	}
	return serverBase(t, sn, d, name)
}

func wantFiles(t *testing.T, export, prefix string, n int) {
	t.Helper()
	for k := range n {
		if _, err := os.Lstat(filepath.Join(export, "d", fmt.Sprintf("%s%d", prefix, k))); err != nil {
			t.Fatalf("the export: %v", err)
		}
	}
}

// TestPermitsRecallReintegrates: another client's change of a directory
// whose permit the mount holds recalls it; the mount sends its log before it
// answers, so the other client's change is made after every logged one (its
// GUARDED CREATE of a logged name fails NFS3ERR_EXIST), and the permit is
// given back.
func TestPermitsRecallReintegrates(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-recall")
	holdPermit(t, sn, d)
	logCreates(t, sn, d, "x", 50)
	if _, err := os.Lstat(filepath.Join(s.export, "d", "x0")); !os.IsNotExist(err) {
		t.Fatalf("a logged create is on the server before any reintegration: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := client.DialNFS(ctx, "tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	res, err := nc.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: d.FH, Name: "x49"}, Mode: nfs3.Guarded})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != nfs3.ErrExist {
		t.Fatalf("another client's GUARDED CREATE of a logged name: %v; want NFS3ERR_EXIST (made after the recall's reintegration)", res.Status)
	}
	wantFiles(t, s.export, "x", 50)
	if st := sn.permits.log.Stats(); st.Records != 0 {
		t.Errorf("%d records left in the log after the recall", st.Records)
	}
	if refs := sn.permits.refs(); len(refs) != 0 {
		t.Errorf("permits still held after the recall: %+v", refs)
	}
}

// TestPermitsSyncDirAndAge: a directory's fsync (SyncDir) reintegrates the
// log at once; records left alone go once the oldest is old enough.
func TestPermitsSyncDirAndAge(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-sync")
	holdPermit(t, sn, d)
	logCreates(t, sn, d, "s", 20)
	if err := sn.SyncDir(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, s.export, "s", 20)

	sn.permits.mu.Lock()
	sn.permits.age = 200 * time.Millisecond
	sn.permits.mu.Unlock()
	logCreates(t, sn, d, "a", 20)
	deadline := time.Now().Add(10 * time.Second)
	for sn.permits.log.Stats().Records > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the log was not reintegrated once old enough")
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantFiles(t, s.export, "a", 20)
}

// TestPermitsServerRestart: a server's restart ends every permit (section
// 21.6): the mount forgets those it held, and what it logged under them is
// sent under the permits asked again.
func TestPermitsServerRestart(t *testing.T) {
	s := newRestartableServer(t)
	_, sn, d := permitsMount(t, s, "permits-restart")
	holdPermit(t, sn, d)
	logCreates(t, sn, d, "r", 10)
	s.restart()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(sn.permits.refs()) > 0 {
		if ctx.Err() != nil {
			t.Fatal("the permits held before the server's restart were not forgotten")
		}
		sn.sess.Null(ctx) // the session finds the restart
		time.Sleep(20 * time.Millisecond)
	}
	var err error
	for {
		if err = sn.SyncDir(ctx, d); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // the grace period's refusals
	}
	if err != nil {
		t.Fatal(err)
	}
	wantFiles(t, s.export, "r", 10)
	if st := sn.permits.log.Stats(); st.Records != 0 {
		t.Errorf("%d records left", st.Records)
	}
}

// TestPermitsRevokedChecked: records made under a permit the server no
// longer holds for the mount (revoked; here given back behind the mount's
// back) are refused SNFS_ERR_NOPERMIT; the mount asks the permit again and
// checks the names they change against their bases (permitlost.go):
// meanwhile another (a process on the server) made v2, which the log
// creates, and put its own file at u1, which the log removes. The records
// of the names nobody else changed are applied (v0, v1 made, u0 removed);
// the CREATE of v2 is refused by the server and the remove of u1 is not
// sent: two conflicts, the other's files untouched.
func TestPermitsRevokedChecked(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-revoked")
	ctx := context.Background()
	dir := filepath.Join(s.export, "d")
	var bases []cml.Base
	for _, n := range []string{"u0", "u1"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("server's "+n), 0o644); err != nil {
			t.Fatal(err)
		}
		bases = append(bases, serverBase(t, sn, d, n))
	}
	holdPermit(t, sn, d)
	mode := uint32(0o644)
	for k := range 3 {
		n := fmt.Sprintf("v%d", k)
		rec := snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: snfs1.ObjRef{FH: d.FH}, Name: n, Attr: nfs3.Sattr{Mode: &mode}}
		if _, err := sn.permits.log.AppendLazyBased(rec, []cml.Base{{Dir: d.FH, Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	for k, n := range []string{"u0", "u1"} {
		rec := snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: d.FH}, Name: n}
		if _, err := sn.permits.log.AppendLazyBased(rec, bases[k:k+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := sn.sess.PermitRelease(ctx, sn.permits.refs()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "v2"), []byte("other's v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new"), []byte("other's u1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "new"), filepath.Join(dir, "u1")); err != nil {
		t.Fatal(err)
	}
	if err := sn.SyncDir(ctx, d); err != nil {
		t.Fatal(err)
	}
	if st := sn.permits.log.Stats(); st.Records != 0 {
		t.Errorf("%d records left", st.Records)
	}
	wantFiles(t, s.export, "v", 2)
	for n, want := range map[string]string{"v2": "other's v2", "u1": "other's u1"} {
		if b, err := os.ReadFile(filepath.Join(dir, n)); err != nil || string(b) != want {
			t.Errorf("%s: %q (%v); want the other's %q", n, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "u0")); !os.IsNotExist(err) {
		t.Errorf("u0, removed by the log and touched by nobody else, is still there: %v", err)
	}
	list, err := ReadConflicts(sn.cfg.CacheDir)
	names := map[string]bool{}
	for _, c := range list {
		names[c.Name] = true
	}
	if err != nil || len(list) != 2 || !names["v2"] || !names["u1"] {
		t.Fatalf("conflicts listed: %+v, %v; want v2's CREATE and u1's UNLINK", list, err)
	}
}

// TestPermitsJukeboxNotConflict: a record the server answers
// NFS3ERR_JUKEBOX (here the grace period after its restart: the remove of a
// file nobody reclaimed) was not applied and conflicts with nothing
// (docs/protocol.md section 21.3): the mount sends it again later. Before,
// it was kept as a conflict and skipped: the removes the application was
// told were made never reached the server.
func TestPermitsJukeboxNotConflict(t *testing.T) {
	s := newRestartableServer(t)
	_, sn, d := permitsMount(t, s, "permits-jukebox")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3
	for k := range n {
		if err := os.WriteFile(filepath.Join(s.export, "d", fmt.Sprintf("j%d", k)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Another client known to the server, gone without unregistering: the
	// restarted server waits for it through its whole grace period.
	other, err := client.DialSession(ctx, "tcp", s.addr, client.SessionConfig{Name: "permits-jukebox-other",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	other.Disconnect()
	holdPermit(t, sn, d)
	for k := range n {
		name := fmt.Sprintf("j%d", k)
		rec := snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: d.FH}, Name: name}
		if _, err := sn.permits.log.AppendLazyBased(rec, []cml.Base{serverBase(t, sn, d, name)}); err != nil {
			t.Fatal(err)
		}
	}
	s.grace = 2 * time.Second
	s.restart()
	restartSeen(ctx, t, sn)
	if err := syncDirAfterGrace(ctx, sn, d); err != nil {
		t.Fatal(err)
	}
	if c := sn.stats.Conflicts.Load(); c != 0 {
		t.Errorf("%d conflicts recorded; want none (a JUKEBOX is no conflict)", c)
	}
	for k := range n {
		if _, err := os.Lstat(filepath.Join(s.export, "d", fmt.Sprintf("j%d", k))); err == nil {
			t.Errorf("j%d is still on the server: its acknowledged remove was dropped", k)
		}
	}
}
