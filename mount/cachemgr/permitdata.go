package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// The data of regular files made locally under a write-back permit, online
// (permitcreate.go; docs/mount.md "The mount's side (--permits=on)"): kept
// in the same local data store as the data of files made while
// disconnected (offlinedata.go), so that writing a new file costs no call
// until the log is reintegrated (its age or length, a directory's fsync,
// Sync, unmount, a recall of a permit). The creator's open of the new file,
// and the creator's later opens while the file's CREATE is still in the
// log, read, write, append, truncate and fsync the local data file; a close
// and an fsync make the data and the log durable locally and send nothing.
// A closed file of at most snfs1.StoreMax bytes goes in the reintegration
// itself, as a CML_STORE record (permitstore.go); otherwise the
// reintegration that makes the file on the server writes its data to
// it right after (pushOffData), before its attributes are taken in: a
// recall's reintegration does it before CB_OK, so the recalling client's
// open meets the data. A mount killed after a close finds the data file at
// its restart (loadOffData) and pushes it after reintegrating its log.
//
// Only with snfsConfig.PermitData (--permit-data=on, the command's default):
// the data pushed by WRITE is not kept in the cache, so reading such a file
// back costs an OPEN and its READs (a small file stored by the
// reintegration is kept cached: permitreadback.go). A file's inode number stays its
// provisional one across its resolution while the mount knows the file
// (permitmake.go, settled: vfs.FS.KeepIno), with or without this.
//
// What the local data does not serve resolves the file as a file made
// without it (permitcreate.go): a lock, an allocation, an extended
// attribute, a link (fusefs resolves a link's target), another user's open,
// a SETATTR other than a truncation (its record would be applied by the
// reintegration before the data is written: a chmod that takes write
// permission away would refuse the WRITEs, and the WRITEs would change the
// times utimes set). The reintegration such a resolution sends pushes the
// data as any other; the open's operations go to the real file's open from
// then on (offReal).

// provDataCreate opens i, the regular file localCreate just made (its
// creation counted as one open of i), on its local data; nil: the file is
// opened as a provisional open without data (permitcreate.go).
func (sn *snfsFS) provDataCreate(i *vfs.Inode, c vfs.Cred, flags int) *vfs.File {
	if !sn.cfg.PermitData {
		return nil // --permit-data=off (snfsConfig.PermitData)
	}
	p := sn.permits
	o, ok := p.made.of(i.FH)
	if !ok || !o.live {
		return nil
	}
	if err := p.newOffData(o.id); err != nil {
		sn.FS.Logger().Warn("local data file of a file made locally", "err", err)
		return nil
	}
	f, err := sn.offlineOpenFile(i, c, flags&^(syscall.O_CREAT|syscall.O_EXCL|syscall.O_TRUNC))
	if err != nil {
		return nil
	}
	i.Mu.Lock()
	i.Opens-- // counted by offlineOpenFile
	i.Mu.Unlock()
	return f
}

// provDataOpen opens the provisional inode i on its local data, online,
// when the local data serves the open: c is the file's creator, the data
// is not pushed yet (nil: the caller resolves i and opens the real file).
func (sn *snfsFS) provDataOpen(i *vfs.Inode, c vfs.Cred, flags int) *vfs.File {
	p := sn.permits
	if p == nil || !p.online || !sn.cfg.PermitData {
		return nil
	}
	o, ok := p.made.of(i.FH)
	if !ok || !o.live || o.creator == nil || o.creator.UID != c.UID || o.creator.GID != c.GID {
		return nil
	}
	f, err := sn.offlineOpenFile(i, c, flags)
	if err != nil {
		return nil
	}
	return f
}

// provDataHeld is the local data of i, a live provisional file, online,
// if not pushed yet (nil: none).
func (sn *snfsFS) provDataHeld(i *vfs.Inode) *offData {
	p := sn.permits
	if p == nil || sn.disc.offline() {
		return nil
	}
	o, ok := p.made.of(i.FH)
	if !ok || !o.live {
		return nil
	}
	od := p.offDataOf(o.id)
	if od == nil {
		return nil
	}
	od.mu.Lock()
	defer od.mu.Unlock()
	if od.pushed {
		return nil
	}
	return od
}

// pushInodeTimes sets the times of od's file fh, whose data was just written,
// to those of its provisional inode (od.mu held): what the mount showed,
// the last local write's mtime or the times set locally (a SETATTR of
// them, logged, is applied by the reintegration before the data). Left to
// the WRITEs, the mtime would be the push's time, and two files pushed in
// one reintegration would get their mtimes in no particular order: a
// source edited after its object was built could look older than it to
// make. No inode (a restarted mount): not sent (the times kept with the
// data, by a SETATTR made offline or locally, are set instead:
// offlinesetattr.go's pushTimes).
func (p *permits) pushInodeTimes(ctx context.Context, od *offData, fh nfs3.FH) (*nfs3.Fattr, bool, error) {
	set, ok := p.localTimes(od)
	if !ok {
		return nil, false, nil
	}
	nc := p.sn.FS.Client(sessionCred())
	res, err := vfs.RPC(ctx, p.sn.FS, func() (*nfs3.WccRes, error) {
		return nc.Setattr(ctx, &nfs3.SetattrArgs{Object: fh, New: set})
	})
	if err != nil {
		return nil, true, fmt.Errorf("SETATTR of the times: %w", err)
	}
	return res.Wcc.After, true, nil
}

// offResolved is the real open behind of, an open on local data, for an
// operation the local data does not serve (a lock, an allocation): online
// the file is resolved (the reintegration pushes its data) and opened;
// offline there is none.
func (sn *snfsFS) offResolved(ctx context.Context, f *vfs.File, of *offFile) (*vfs.File, error) {
	if sn.disc.offline() {
		return nil, ErrDisconnected
	}
	return sn.offReal(ctx, f, of)
}

// localTimes is a SETATTR of od's local inode's atime and mtime; false
// (nothing set) when the mount no longer knows the inode.
func (p *permits) localTimes(od *offData) (nfs3.Sattr, bool) {
	i := p.sn.FS.LookupInode(provFH(od.id))
	if i == nil {
		return nfs3.Sattr{}, false
	}
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return nfs3.Sattr{Atime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: i.Attr.Atime},
		Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: i.Attr.Mtime}}, true
}

// dataPush is one file's data to write to the object the server made.
type dataPush struct {
	od *offData
	fh nfs3.FH
}

// pushParallel bounds the files whose data is written at once: a
// reintegration of a copied tree pushes one WRITE per small file, and
// their round trips overlap.
const pushParallel = 16

// pushEach runs fn on each of push, pushParallel at a time, and returns
// once all are done.
func (p *permits) pushEach(push []dataPush, fn func(dataPush)) {
	if len(push) <= 1 {
		for _, d := range push {
			fn(d)
		}
		return
	}
	sem := make(chan struct{}, pushParallel)
	var wg sync.WaitGroup
	for _, d := range push {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(d)
		}()
	}
	wg.Wait()
}

// pushInFlight bounds the WRITEs of one file's data in flight at once.
const pushInFlight = 4

// writeData writes od's data to fh (od.mu held) and returns its size and
// the file's attributes after it (nil: none: no data, or not given). Data
// that fits one WRITE goes as one FILE_SYNC WRITE; more goes as UNSTABLE
// WRITEs, pushInFlight in flight, and one COMMIT, written again FILE_SYNC
// if the server's write verifier changed meanwhile (it restarted).
//
// The server's file is then cut to the local size when it may hold more:
// its data is not always nothing (a CML_STORE of an earlier content was
// applied, and a rewrite that truncated the file is what is pushed now), so
// an empty file's push costs a SETATTR of its size, and a file the WRITEs
// left longer than the local data (the replies' attributes say) costs one.
func (p *permits) writeData(ctx context.Context, od *offData, fh nfs3.FH) (int64, *nfs3.Fattr, error) {
	n, attr, err := p.writeBytes(ctx, od, fh)
	if err != nil || (n > 0 && attr != nil && attr.Size == uint64(n)) {
		return n, attr, err
	}
	size := uint64(n)
	// With the times the local file has, as pushInodeTimes sets them after
	// WRITEs: the size's change must not stamp the server's time.
	set, _ := p.localTimes(od)
	set.Size = &size
	nc := p.sn.FS.Client(sessionCred())
	res, err := vfs.RPC(ctx, p.sn.FS, func() (*nfs3.WccRes, error) {
		return nc.Setattr(ctx, &nfs3.SetattrArgs{Object: fh, New: set})
	})
	if err != nil {
		return 0, nil, fmt.Errorf("SETATTR of the size: %w", err)
	}
	return n, res.Wcc.After, nil
}

// writeBytes is writeData's WRITEs and COMMIT.
func (p *permits) writeBytes(ctx context.Context, od *offData, fh nfs3.FH) (int64, *nfs3.Fattr, error) {
	f, err := os.Open(od.path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, nil, err
	}
	size := st.Size()
	if size == 0 {
		return 0, nil, nil
	}
	ws := int64(p.sn.FS.WriteSize())
	if size <= ws {
		return p.writeRange(ctx, f, fh, 0, size, nfs3.FileSync)
	}
	nc := p.sn.FS.Client(sessionCred())
	sem := make(chan struct{}, pushInFlight)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		werr  error
		verfs [][nfs3.WriteVerfSize]byte
	)
	note := func(v [nfs3.WriteVerfSize]byte) {
		mu.Lock()
		verfs = append(verfs, v)
		mu.Unlock()
	}
	for off := int64(0); off < size; off += ws {
		sem <- struct{}{}
		wg.Add(1)
		go func(off int64) {
			defer func() { <-sem; wg.Done() }()
			_, _, err := p.writeRangeVerf(ctx, f, fh, off, min(ws, size-off), nfs3.Unstable, note)
			if err != nil {
				mu.Lock()
				werr = errors.Join(werr, err)
				mu.Unlock()
			}
		}(off)
	}
	wg.Wait()
	if werr != nil {
		return 0, nil, werr
	}
	cr, err := vfs.RPC(ctx, p.sn.FS, func() (*nfs3.CommitRes, error) { return nc.Commit(ctx, fh, 0, 0) })
	if err != nil {
		return 0, nil, fmt.Errorf("COMMIT: %w", err)
	}
	for _, v := range verfs {
		if v != cr.Verf {
			// The server restarted between a WRITE and the COMMIT: what
			// it lost is written again, stable.
			return p.writeRange(ctx, f, fh, 0, size, nfs3.FileSync)
		}
	}
	return size, cr.Wcc.After, nil
}

// writeRange writes [off, off+n) of f to fh as how, WRITE after WRITE.
func (p *permits) writeRange(ctx context.Context, f *os.File, fh nfs3.FH, off, n int64, how nfs3.StableHow) (int64, *nfs3.Fattr, error) {
	return p.writeRangeVerf(ctx, f, fh, off, n, how, nil)
}

// writeRangeVerf is writeRange, each WRITE's verifier given to note (nil:
// not).
func (p *permits) writeRangeVerf(ctx context.Context, f *os.File, fh nfs3.FH, off, n int64, how nfs3.StableHow, note func([nfs3.WriteVerfSize]byte)) (int64, *nfs3.Fattr, error) {
	nc := p.sn.FS.Client(sessionCred())
	buf := make([]byte, min(n, int64(p.sn.FS.WriteSize())))
	var after *nfs3.Fattr
	end := off + n
	for off < end {
		k, rerr := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
		if k == 0 {
			if rerr == nil || errors.Is(rerr, io.EOF) {
				break // shortened meanwhile: what is left is written
			}
			return off, nil, rerr
		}
		data := buf[:k]
		for len(data) > 0 {
			wr, err := vfs.RPC(ctx, p.sn.FS, func() (*nfs3.WriteRes, error) {
				return nc.Write(ctx, fh, uint64(off), data, how)
			})
			if err != nil {
				return off, nil, fmt.Errorf("WRITE: %w", err)
			}
			if wr.Count == 0 {
				return off, nil, errors.New("WRITE: nothing written")
			}
			if note != nil {
				note(wr.Verf)
			}
			after = wr.Wcc.After
			data, off = data[wr.Count:], off+int64(wr.Count)
		}
	}
	return off, after, nil
}

// pushBeforeCallback writes, before a file's callback is answered, the
// data of fh if it is a file made locally whose data is not on the server
// yet. The server records the maker of a file a reintegration made as its
// closed dirty holder (docs/protocol.md section 21.3): another client's
// open of it calls the maker back first, and may do so between the
// REINTEGRATE's reply and the push that follows it (pushOffData), even
// before the reply is taken in here. So the reintegration in progress, if
// any, is waited for (it pushes), and what it left unpushed of fh is
// pushed now.
//
// Not for a regular file this mount knows by fh, its real handle, of which
// it holds no local data: the reintegration in progress cannot have made
// it (a file it made is known by its real handle only once settled, after
// its data's push and after the log learnt its handle), so it pushes
// nothing of it, and the callback's own write-back sends what the cache
// holds. Waiting anyway closed a cycle (docs/protocol.md section 11): that
// reintegration may itself wait, on the server, for another client's
// answer to a callback, which that client held the same way behind its
// own reintegration waiting for this answer, until the callback timeout
// fenced both (TestDataCallbackNotHeldByReintegration).
func (p *permits) pushBeforeCallback(ctx context.Context, fh nfs3.FH) {
	p.off.mu.Lock()
	n := len(p.off.data)
	p.off.mu.Unlock()
	if n == 0 || isProvFH(fh) || p.sn.disc.offline() {
		return
	}
	if i := p.sn.FS.LookupInode(fh); i != nil && i.Type != nfs3.TypeReg {
		return // a directory's break
	} else if i != nil && p.offDataByHandle(fh) == nil {
		return // known, nothing local: no wait (above)
	}
	// The wait ends with the callback's context too: the callback is
	// answered then, with the data pushed or not.
	ended := make(chan struct{})
	go func() {
		p.reint.Lock()
		p.reint.Unlock() //nolint:staticcheck // waits for the reintegration in progress
		close(ended)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		return
	}
	od := p.offDataByHandle(fh)
	if od == nil {
		return
	}
	od.mu.Lock()
	pushed := od.pushed
	od.mu.Unlock()
	if !pushed && p.log.Stores(od.id) {
		// Its data is in a STORE record the reintegration did not get
		// in (permitstore.go): pushed now, the record sent later would
		// write it again over what the file got since. The log goes
		// instead, with the record.
		if err := p.reintegrate(ctx, "a callback of a file whose data is in the log"); err != nil {
			p.sn.FS.Logger().Warn("reintegrating before a callback's answer", "err", err)
		}
		return
	}
	if _, _, err := p.pushOne(ctx, od, fh); err != nil {
		p.sn.FS.Logger().Warn("writing a file's local data before its callback's answer", "err", err)
	}
}

// offDataByHandle is the local data of the file whose real handle the log
// learnt is fh (nil: none).
func (p *permits) offDataByHandle(fh nfs3.FH) *offData {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	for _, d := range p.off.data {
		if h, ok := p.log.Handle(d.id); ok && string(h) == string(fh) {
			return d
		}
	}
	return nil
}
