package cml

import (
	"fmt"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Append logs rec and returns its LSN once the record is durable: written
// and flushed by fdatasync, the flush shared with every Append that wrote
// meanwhile (a group commit: waitFlushed). A record Append acknowledged
// survives a crash of the mount and of the machine.
//
// The LSN is the log's next (rec.LSN is ignored). A record that makes an
// object (CREATE, MKDIR, SYMLINK) gets its LSN as its provisional id
// (rec.New): later records name the object by ObjRef{Prov: lsn} until the
// server has returned its real handle (Handle).
func (l *Log) Append(rec snfs1.CMLRecord) (uint64, error) {
	return l.append(rec, true)
}

// AppendLazy is Append without the flush: the record is written to the
// kernel (it survives a kill of the mount, not a crash of the machine) and
// is flushed by the next Append, Sync or reintegration. For changes POSIX
// does not make durable before an fsync either; a directory's fsync calls
// Sync.
func (l *Log) AppendLazy(rec snfs1.CMLRecord) (uint64, error) {
	return l.append(rec, false)
}

// Sync returns once every record appended so far is flushed.
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	return l.waitFlushed(l.written)
}

func (l *Log) append(rec snfs1.CMLRecord, flush bool) (uint64, error) {
	return l.appendBased(rec, flush, nil)
}

func (l *Log) appendBased(rec snfs1.CMLRecord, flush bool, bases []Base) (uint64, error) {
	if err := checkRecord(&rec); err != nil {
		return 0, err
	}
	rec = cloneRecord(rec)
	at := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	for _, o := range refs(&rec) {
		if o.Prov != 0 && o.Prov >= l.next {
			return 0, fmt.Errorf("cml: %s names provisional id %d, which no record gave", rec.Op, o.Prov)
		}
	}
	rec.LSN = l.next
	if makes(rec.Op) {
		rec.New = rec.LSN
	} else {
		rec.New = 0
	}
	f := frame{kind: kindOp, at: at.UnixNano(), rec: rec}
	var added []Base
	if len(bases) > 0 {
		added = l.addBasesLocked(bases)
		// Every base given goes in the frame, also of a name with one in
		// memory already: on disk an acknowledgement may come before
		// this record (written while its flush let mu go) and drop that
		// one at replay, which then takes the name's base from here.
		f.kind, f.bases = kindOpBased, cloneBases(bases)
	}
	pos, err := l.write(appendFrame(nil, &f))
	if err != nil {
		for _, b := range added {
			delete(l.bases, baseKey(b.Dir, b.Name))
		}
		return 0, err
	}
	l.next++
	l.pending = append(l.pending, entry{rec: rec, at: at})
	l.bytes += int64(recordSize(&rec))
	if !flush {
		return rec.LSN, nil
	}
	return rec.LSN, l.waitFlushed(pos)
}

// makes reports whether op makes an object (and gives a provisional id).
func makes(op snfs1.CMLOp) bool {
	return op == snfs1.CMLCreate || op == snfs1.CMLMkdir || op == snfs1.CMLSymlink
}

// refs returns the object references rec uses.
func refs(rec *snfs1.CMLRecord) []*snfs1.ObjRef {
	switch rec.Op {
	case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink, snfs1.CMLUnlink, snfs1.CMLRmdir:
		return []*snfs1.ObjRef{&rec.Dir}
	case snfs1.CMLLink:
		return []*snfs1.ObjRef{&rec.Obj, &rec.Dir}
	case snfs1.CMLRename:
		return []*snfs1.ObjRef{&rec.Dir, &rec.ToDir}
	case snfs1.CMLSetattr, snfs1.CMLStore:
		return []*snfs1.ObjRef{&rec.Obj}
	}
	return nil
}

// checkRecord refuses what REINTEGRATE's decoder would refuse, so that
// nothing logged is unsendable or unreadable.
func checkRecord(rec *snfs1.CMLRecord) error {
	if rec.Op < snfs1.CMLCreate || rec.Op > snfs1.CMLSetattr && rec.Op != snfs1.CMLStore {
		return fmt.Errorf("cml: %s: unknown op", rec.Op)
	}
	if rec.Op == snfs1.CMLStore && len(rec.Data) > snfs1.StoreMax {
		return fmt.Errorf("cml: STORE: %d bytes of data", len(rec.Data))
	}
	for _, o := range refs(rec) {
		if o.Prov == 0 && (len(o.FH) == 0 || len(o.FH) > nfs3.FHSize) {
			return fmt.Errorf("cml: %s: a handle of %d bytes", rec.Op, len(o.FH))
		}
	}
	names := []string{}
	switch rec.Op {
	case snfs1.CMLSetattr, snfs1.CMLStore:
	case snfs1.CMLRename:
		names = append(names, rec.Name, rec.ToName)
	default:
		names = append(names, rec.Name)
	}
	for _, n := range names {
		if n == "" || len(n) > nfs3.MaxName {
			return fmt.Errorf("cml: %s: a name of %d bytes", rec.Op, len(n))
		}
	}
	if rec.Op == snfs1.CMLSymlink && len(rec.Target) > nfs3.MaxPath {
		return fmt.Errorf("cml: SYMLINK: a target of %d bytes", len(rec.Target))
	}
	return nil
}

// Stats is what `snfs status` shows of the log (Coda's `cfs listcml`).
type Stats struct {
	Records int           // records not yet reintegrated (raw, or in the plan being sent)
	Bytes   int64         // their encoded size
	Oldest  time.Duration // age of the oldest of them (0: none)
	Planned int           // of Records, those of the plan being reintegrated
	NextLSN uint64
}

// Stats returns the log's length, size and age.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Records: len(l.pending) + len(l.plan), Bytes: l.bytes, Planned: len(l.plan), NextLSN: l.next}
	var oldest time.Time
	if len(l.plan) > 0 {
		oldest = l.planAt
	}
	if len(l.pending) > 0 && (oldest.IsZero() || l.pending[0].at.Before(oldest)) {
		oldest = l.pending[0].at
	}
	if !oldest.IsZero() {
		s.Oldest = max(l.now().Sub(oldest), 0)
	}
	return s
}

// Len is the number of records not yet reintegrated.
func (l *Log) Len() int { return l.Stats().Records }

// Handle returns the real handle the server gave the object of provisional
// id prov (false: not reintegrated yet, or forgotten).
func (l *Log) Handle(prov uint64) (nfs3.FH, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fh, ok := l.handles[prov]
	return fh, ok
}

// Forget drops provisional ids whose real handles the mount has recorded
// itself (its cache directory rekeyed): they are left out of the next
// compaction. Ids still named by records not yet reintegrated are kept.
func (l *Log) Forget(provs ...uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	named := map[uint64]bool{}
	note := func(rec *snfs1.CMLRecord) {
		for _, o := range refs(rec) {
			named[o.Prov] = true
		}
	}
	for i := range l.plan {
		note(&l.plan[i])
	}
	for i := range l.pending {
		note(&l.pending[i].rec)
	}
	for _, p := range provs {
		if !named[p] {
			delete(l.handles, p)
		}
	}
}

// Records returns a copy of the records not yet reintegrated, in order: the
// plan's, then the raw ones after it (for `snfs status`'s listing and the
// tests).
func (l *Log) Records() []snfs1.CMLRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]snfs1.CMLRecord(nil), l.plan...)
	for _, e := range l.pending {
		out = append(out, e.rec)
	}
	return out
}
