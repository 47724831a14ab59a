package cachemgr

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"snfs/mount/cml"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// Reintegration of what was logged offline (offline.go; docs/mount.md,
// "Disconnected operation"). Offline there was no permit: nothing held
// anyone else back from the directories the log changes. So, before the
// log is sent:
//
//   - the permits of every directory (the server made) that the log
//     changes are asked for (GET_PERMIT breaks the others' promises, and
//     holds their changes back from then on: what the server holds then is
//     what the records meet). A permit refused is asked again a few times;
//     if one is still refused, nothing is sent (no record is refused
//     SNFS_ERR_NOPERMIT for it, which would be no real conflict): the log
//     waits for the next reintegration;
//   - each name the log changes in those directories is looked up (LOOKUP)
//     and compared with what it held as the mount went offline (its base,
//     offBase): another object there, or none where there was one, or one
//     where there was none, or the same regular file at another version
//     (size and mtime: written meanwhile, by another client, a process on
//     the server or a stock NFS client), is another's change meanwhile: a
//     conflict.
//     Such a name is "poisoned": the records that would remove, move or
//     replace what it holds now (UNLINK, RMDIR, RENAME from or over it)
//     are not sent and are kept as conflicts instead (they would act on
//     the other's object); a CREATE or MKDIR of it is sent, and the server
//     refuses it (NFS3ERR_EXIST, GUARDED): the data of a file made so goes
//     to a conflict copy beside it. A record the server refuses poisons
//     its names too.
//
// A name nobody else changed is not poisoned, and its records are applied
// as they were made: no conflict copy where nothing conflicted.

// offPermitTries bounds the GET_PERMITs asked for one directory before a
// reintegration of a log with offline records (or with records whose
// permit was lost: permitlost.go) gives up for now.
const offPermitTries = 20

// errOfflinePermits: a permit the log needs was refused: nothing is sent.
var errOfflinePermits = errPermitsWait

// offPrepare asks the permits and checks the bases before a log with
// offline records is sent (p.reint held).
func (p *permits) offPrepare(ctx context.Context) error {
	p.off.mu.Lock()
	pending, refused := p.off.pending, p.off.refused
	p.off.mu.Unlock()
	if !pending {
		return nil
	}
	if !refused.IsZero() && time.Since(refused) < permitRefusal {
		// Asked lately and refused: a directory read or change through
		// the server does not wait for the asking again.
		return errOfflinePermits
	}
	gone, err := p.regainAll(ctx, p.attrDirs(p.log.Dirs())) // permitlost.go
	p.off.mu.Lock()
	if errors.Is(err, errPermitsWait) {
		p.off.refused = time.Now()
	} else {
		p.off.refused = time.Time{}
	}
	p.off.mu.Unlock()
	if err != nil {
		return err
	}
	p.markGone(gone)
	if err := p.checkBases(ctx); err != nil {
		return err
	}
	p.sn.afterOffCheck.run(nil)
	return nil
}

// checkBases compares each name and object with a base noted offline and
// not yet checked with what the server holds now, poisons those another
// changed, and keeps what it found (saveChecked). p.reint held, the
// permits asked. A base an offline change notes during the check (one
// racing the reconnection) stays for the next call: offSender makes it
// before it sends a batch.
func (p *permits) checkBases(ctx context.Context) error {
	p.off.mu.Lock()
	bases := make([]offBase, 0, len(p.off.base))
	keys := make([]string, 0, len(p.off.base))
	for k, b := range p.off.base {
		bases = append(bases, b)
		keys = append(keys, k)
	}
	p.off.mu.Unlock()
	p.sn.offChecking.run(nil)
	for _, b := range bases {
		changed, err := p.baseChanged(ctx, b) // permitlost.go
		if err != nil {
			return err
		}
		if changed {
			p.poison(offNameKey(snfs1.ObjRef{FH: b.dir}, b.name))
		}
	}
	if err := p.checkAttrBases(ctx); err != nil { // offlineattr.go
		return err
	}
	p.off.mu.Lock()
	// Checked: under the permits now, nobody else changes them.
	for _, k := range keys {
		delete(p.off.base, k)
	}
	p.off.checked = true
	p.saveChecked() // offlinebase.go: kept until the whole log is in
	p.off.mu.Unlock()
	return nil
}

// unchecked reports whether a base noted offline is not checked yet.
func (p *permits) unchecked() bool {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	return len(p.off.base) > 0 || len(p.off.attr) > 0
}

// offDone: the whole log is on the server (what was poisoned, and the
// directories found gone, are forgotten). Without --permits=on, the
// permits asked for it are given back: nothing more is made under them.
func (p *permits) offDone(ctx context.Context) {
	p.off.mu.Lock()
	was := p.off.pending
	if was || p.off.durable { // durable: a check's findings loaded by a mount without disconnected operation
		p.dropBases()
	}
	p.off.pending, p.off.base, p.off.poison, p.off.checked = false, nil, nil, false
	p.off.attr, p.off.attrChecked = nil, nil
	p.off.mu.Unlock()
	p.mu.Lock()
	p.goneDirs = nil
	p.mu.Unlock()
	if was && !p.online && !p.sn.disc.offline() {
		p.releaseAll(ctx)
	}
}

func (p *permits) poison(k string) {
	p.off.mu.Lock()
	if p.off.poison == nil {
		p.off.poison = map[string]bool{}
	}
	if !p.off.poison[k] && p.off.durable {
		p.saveLine(baseLine{Kind: "poison", Key: hex.EncodeToString([]byte(k))})
	}
	p.off.poison[k] = true
	p.off.mu.Unlock()
}

// poisonRecord poisons the names rec changes (refused).
func (p *permits) poisonRecord(rec *snfs1.CMLRecord) {
	p.off.mu.Lock()
	checked := p.off.pending || p.off.checked
	p.off.mu.Unlock()
	if !checked || rec.Op == snfs1.CMLSetattr || rec.Op == snfs1.CMLStore {
		return
	}
	p.poison(offNameKey(rec.Dir, rec.Name))
	if rec.Op == snfs1.CMLRename {
		p.poison(offNameKey(rec.ToDir, rec.ToName))
	}
}

// poisoned reports whether rec acts on a poisoned name's object.
func (p *permits) poisoned(rec *snfs1.CMLRecord) bool {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	if len(p.off.poison) == 0 {
		return false
	}
	switch rec.Op {
	case snfs1.CMLUnlink, snfs1.CMLRmdir:
		return p.off.poison[offNameKey(rec.Dir, rec.Name)]
	case snfs1.CMLRename:
		return p.off.poison[offNameKey(rec.Dir, rec.Name)] || p.off.poison[offNameKey(rec.ToDir, rec.ToName)]
	case snfs1.CMLSetattr:
		// An object the server made whose attributes another changed
		// meanwhile (offlineattr.go).
		return rec.Obj.FH != nil && p.off.poison[attrKey(rec.Obj.FH)]
	}
	return false
}

// unpoisonMade: records applied made their names again (this mount's
// objects now).
func (p *permits) unpoisonMade(recs []snfs1.CMLRecord, rep *snfs1.ReintegrateRes) {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	if len(p.off.poison) == 0 {
		return
	}
	for k := range rep.Results {
		if k >= len(recs) || rep.Results[k].Status != nfs3.OK {
			return
		}
		if op := recs[k].Op; op == snfs1.CMLCreate || op == snfs1.CMLMkdir || op == snfs1.CMLSymlink {
			key := offNameKey(recs[k].Dir, recs[k].Name)
			if p.off.poison[key] && p.off.durable {
				p.saveLine(baseLine{Kind: "unpoison", Key: hex.EncodeToString([]byte(key))})
			}
			delete(p.off.poison, key)
		}
	}
}

// offSender sends REINTEGRATE for the log, except the records that act on
// a poisoned name: the batch is cut before the first, which is answered as
// refused (NFS3ERR_EXIST: the name's object is not the one the record
// was made on), without being sent.
type offSender struct {
	p *permits
	s cml.Sender
}

func (w offSender) Reintegrate(ctx context.Context, perms []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	if w.p.unchecked() {
		// An offline change made during the reconnection: its base is
		// checked before any record goes (its record may be in this batch).
		if err := w.p.checkBases(ctx); err != nil {
			return nil, err
		}
	}
	k := -1
	for i := range recs {
		if w.p.poisoned(&recs[i]) {
			k = i
			break
		}
	}
	refused := snfs1.CMLResult{Status: nfs3.ErrExist}
	if k == 0 {
		refused.LSN = recs[0].LSN
		return &snfs1.ReintegrateRes{Applied: recs[0].LSN - 1, Results: []snfs1.CMLResult{refused}}, nil
	}
	send := recs
	if k > 0 {
		send = recs[:k]
	}
	rep, err := w.s.Reintegrate(ctx, perms, send)
	w.p.logBatch(send, rep, err)
	if err != nil {
		return rep, err
	}
	w.p.unpoisonMade(send, rep)
	if k > 0 && len(rep.Results) == k && rep.Results[k-1].Status == nfs3.OK {
		refused.LSN = recs[k].LSN
		rep.Results = append(rep.Results, refused)
	}
	return rep, nil
}

// logBatch logs, at debug level, a REINTEGRATE's records (LSN, operation,
// name, new name) and their results: what a user's "where did my rename
// go" needs, and what the soak's findings are read with.
func (p *permits) logBatch(recs []snfs1.CMLRecord, rep *snfs1.ReintegrateRes, err error) {
	lg := p.sn.FS.Logger()
	if !lg.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	var b strings.Builder
	for i := range recs {
		r := &recs[i]
		fmt.Fprintf(&b, " %d:%v:%q", r.LSN, r.Op, r.Name)
		if r.ToName != "" {
			fmt.Fprintf(&b, "->%q", r.ToName)
		}
	}
	var res strings.Builder
	if rep != nil {
		fmt.Fprintf(&res, "applied=%d", rep.Applied)
		for _, r := range rep.Results {
			if r.Status != nfs3.OK {
				fmt.Fprintf(&res, " %d:%v", r.LSN, r.Status)
			}
		}
	}
	lg.Debug("REINTEGRATE", "records", b.String(), "result", res.String(), "err", err)
}

// pushOffData writes the data of the files made offline or locally
// (permitdata.go) that the server made now (made: this reintegration's;
// and any left from an earlier one) to them, several at once, and puts in
// made the attributes the file has after its data (from the last WRITE's
// or the COMMIT's reply; none given: none, and the object's attributes are
// asked again at its next use). What fails stays to be pushed: by the next
// reintegration, the log's loop (retryPushes), a directory's fsync, Sync
// or unmount (syncData), an open of the file (pushBeforeOpen) or a
// callback of it (pushBeforeCallback). A file whose CML_STORE record the
// reintegration applied is not pushed: its data is on the server; nor is
// one with a STORE still in the log (a batch failed): that record, sent
// again, would write its data over what the push wrote (permitstore.go).
// The caller holds p.reint. It returns the pushes that failed.
func (p *permits) pushOffData(ctx context.Context, made map[uint64]cml.Made) error {
	p.off.mu.Lock()
	var ods []*offData
	for _, od := range p.off.data {
		ods = append(ods, od)
	}
	p.off.mu.Unlock()
	var push []dataPush
	for _, od := range ods {
		fh, ok := p.log.Handle(od.id)
		if m, got := made[od.id]; got {
			fh, ok = m.FH, true
		}
		if !ok {
			continue
		}
		od.mu.Lock()
		stored, waits := p.storedNow(od)
		od.mu.Unlock()
		if !stored && !waits {
			push = append(push, dataPush{od, fh})
		}
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	p.pushEach(push, func(d dataPush) { // permitdata.go
		attr, wrote, err := p.pushOne(ctx, d.od, d.fh)
		if err != nil {
			p.sn.FS.Logger().Warn("writing the data of a file made locally or offline (kept to write again)", "fh", hex.EncodeToString(d.fh), "err", err)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		if wrote {
			mu.Lock()
			if m, got := made[d.od.id]; got {
				m.Attr = attr
				made[d.od.id] = m
			}
			mu.Unlock()
			if ri := p.sn.FS.LookupInode(d.fh); ri != nil {
				ri.Invalidate()
			}
		}
	})
	return errors.Join(errs...)
}

// pushOne writes od's data to fh, and forgets od; wrote: the file's
// attributes changed (attr: after the data, nil: not given).
func (p *permits) pushOne(ctx context.Context, od *offData, fh nfs3.FH) (attr *nfs3.Fattr, wrote bool, err error) {
	od.mu.Lock()
	defer od.mu.Unlock()
	if od.pushed {
		return nil, false, nil
	}
	n, attr, err := p.writeData(ctx, od, fh)
	if errors.Is(err, nfs3.ErrStale) {
		// Removed on the server by a later record (renamed over, say)
		// after the reintegration made it: nothing to write it to.
		attr, err = nil, nil
	}
	sent := false
	if err == nil && n > 0 {
		attr, sent, err = p.pushInodeTimes(ctx, od, fh) // permitdata.go
	}
	if err == nil && !sent {
		err = p.pushTimes(ctx, od, fh) // offlinesetattr.go: those kept, after a restart
	}
	if err != nil {
		return nil, true, err
	}
	p.offDataPushed(od)
	return attr, n > 0, nil
}

// offDataPushed: od's data is on the server (od.mu held).
func (p *permits) offDataPushed(od *offData) {
	od.pushed = true
	if od.f != nil {
		od.f.Close()
		od.f = nil
	}
	os.Remove(od.path)
	od.dropTimes()
	p.off.mu.Lock()
	delete(p.off.data, od.id)
	p.off.mu.Unlock()
}

// writeOffData writes od's data to fh (od.mu held; permitdata.go).
func (p *permits) writeOffData(ctx context.Context, od *offData, fh nfs3.FH) (int64, error) {
	n, _, err := p.writeData(ctx, od, fh)
	return n, err
}

// offRefused takes in a refused record: its names are poisoned, and a
// CREATE's offline data goes to a conflict copy beside its name (reported
// true: the conflict is recorded).
func (p *permits) offRefused(ctx context.Context, rec *snfs1.CMLRecord, st snfs1.Status, why string) bool {
	p.poisonRecord(rec)
	if p.attrRefused(rec, st, why) { // offlineattr.go
		return true
	}
	if rec.Op != snfs1.CMLCreate || rec.New == 0 {
		return false
	}
	od := p.offDataOf(rec.New)
	if od == nil {
		return false
	}
	dir := rec.Dir.FH
	if rec.Dir.Prov != 0 {
		dir, _ = p.log.Handle(rec.Dir.Prov)
	}
	if len(dir) == 0 {
		dir = p.sn.FS.Cfg.Root // its directory is not on the server either
	}
	od.mu.Lock()
	defer od.mu.Unlock()
	if od.pushed {
		return false
	}
	cname, size, err := p.offlineConflictCopy(ctx, od, dir, rec.Name)
	if err != nil {
		p.sn.FS.Logger().Error("a conflict copy of a file made offline (its data stays in the cache directory)", "name", rec.Name, "path", od.path, "err", err)
		return false
	}
	p.offDataPushed(od)
	sn := p.sn
	sn.stats.Conflicts.Add(1)
	reason := fmt.Sprintf("disconnected: %s refused (status %d, LSN %d, %s)", rec.Op, st, rec.LSN, why)
	sn.FS.Logger().Warn("conflict: a file made while disconnected kept beside the server's", "path", sn.FS.PathFrom(nil, dir, rec.Name),
		"copy", cname, "size", size, "status", st)
	c := Conflict{Time: time.Now().UTC(), Name: rec.Name, DirFH: hex.EncodeToString(dir), Conflict: cname, Size: size, Reason: reason}
	if err := appendConflict(sn.cfg.CacheDir, c); err != nil {
		sn.FS.Logger().Error("recording a conflict", "err", err)
	}
	return true
}

// offlineConflictCopy makes NAME.snfs-conflict-HOST-UNIXTIME in dir with
// od's data (od.mu held).
func (p *permits) offlineConflictCopy(ctx context.Context, od *offData, dir nfs3.FH, name string) (string, int64, error) {
	host, _, _ := strings.Cut(p.sn.sess.Name(), ":")
	cname := fmt.Sprintf("%s.snfs-conflict-%s-%d", name, host, time.Now().Unix())
	nc := p.sn.FS.Client(sessionCred())
	mode := uint32(0o644)
	var res *nfs3.CreateRes
	for n := 2; ; n++ {
		var err error
		res, err = vfs.RPC(ctx, p.sn.FS, func() (*nfs3.CreateRes, error) {
			return nc.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: cname}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
		})
		if errors.Is(err, nfs3.ErrExist) && n < 100 {
			cname = fmt.Sprintf("%s.snfs-conflict-%s-%d-%d", name, host, time.Now().Unix(), n)
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("CREATE %q: %w", cname, err)
		}
		break
	}
	if res.Object == nil {
		return "", 0, fmt.Errorf("CREATE %q: no handle", cname)
	}
	size, err := p.writeOffData(ctx, od, res.Object)
	return cname, size, err
}
