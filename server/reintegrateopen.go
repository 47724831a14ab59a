package server

import (
	"maps"
	"slices"
	"sync"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// CML_CREATE_OPEN (docs/protocol.md section 21.3, "Opens"): a CML_CREATE
// whose file the server also opens for writing for the caller, as
// CREATE_OPEN's open part does. The client made the file under its permit
// and holds it open; the first operation that needs the server (a write)
// sends the log, and this open spares it the OPEN that would follow.
//
// The open is counted when the record is applied, before the reply: a
// reply that is lost leaves it counted for a client that does not know the
// handle. A resend of the batch (a new xid: the reply cache answers the same
// xid) finds the record applied before and must neither count a second open
// nor leave the first one counted with nobody to CLOSE it: the grant is
// remembered here, in memory (an open does not survive a restart: a resend
// after one is answered not granted), by the client's table id and the
// record's LSN, and the resend answers it again (CML_CREATE_OPEN: the client
// takes it now) or withdraws it (the record resent as a plain CML_CREATE: a
// later mount's resend, which has no open to give it to). An open a
// callback has since taken back (the client answered CB_STALE: it did not
// know the handle) is no longer counted, and is answered not granted.

// openWanted is the open a CML_CREATE_OPEN record just applied asks for.
type openWanted struct {
	lsn uint64
	fh  nfs3.FH
}

// reintGrant is an open a CML_CREATE_OPEN record was granted.
type reintGrant struct {
	fh    nfs3.FH
	reply state.OpenReply
}

// reintOpenMemo is the opens CML_CREATE_OPEN records were granted, by
// client and LSN, from the client's latest batch's first LSN on (at most
// madeMax a client: two batches').
type reintOpenMemo struct {
	mu sync.Mutex
	m  map[state.ClientID]map[uint64]reintGrant
}

func (m *reintOpenMemo) put(c state.ClientID, lsn uint64, g reintGrant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[state.ClientID]map[uint64]reintGrant{}
	}
	cm := m.m[c]
	if cm == nil {
		cm = map[uint64]reintGrant{}
		m.m[c] = cm
	}
	cm[lsn] = g
	if len(cm) > madeMax {
		lsns := slices.Sorted(maps.Keys(cm))
		for _, l := range lsns[:len(lsns)-madeMax] {
			delete(cm, l)
		}
	}
}

// take returns and forgets the grant of client c's record lsn.
func (m *reintOpenMemo) take(c state.ClientID, lsn uint64) (reintGrant, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.m[c][lsn]
	if ok {
		delete(m.m[c], lsn)
	}
	return g, ok
}

// below forgets client c's grants below lsn: answered, the client having
// gone past them.
func (m *reintOpenMemo) below(c state.ClientID, lsn uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := range m.m[c] {
		if l < lsn {
			delete(m.m[c], l)
		}
	}
	if len(m.m[c]) == 0 {
		delete(m.m, c)
	}
}

// forget drops client c's grants (its registration is gone, and with it
// every open the table counted for it).
func (m *reintOpenMemo) forget(c state.ClientID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, c)
}

// openNow opens the file the record at index i made for the caller
// (b.toOpen), as CREATE_OPEN's open part: the access check as the caller,
// then the table's OPEN_WRITE. It reports whether the open was answered at
// once; if not (the table calls other clients back first: someone opened
// the new name meanwhile), the batch goes on from index i+1 when it is.
func (b *batch) openNow(i int, finish func()) bool {
	w := b.toOpen
	b.toOpen = nil
	s := b.s
	verf := s.consist.ServerVerifier()
	obj, err := s.resolve(b.c, w.fh)
	if err == nil {
		if err = s.mayOpen(obj, state.Write); err != nil {
			obj.release()
		}
	}
	if err != nil {
		// Not opened: the file's maker is its closed dirty holder, as
		// after a CML_CREATE, and OPENs it itself.
		s.consist.Created(b.mid, w.fh, s.changeAttr(nil, w.fh))
		b.opens = append(b.opens, snfs1.CMLOpen{LSN: w.lsn, ServerVerf: verf, Open: snfs1.OpenRes{Status: statusOf(err)}})
		return true
	}
	inline, ready := true, false
	answered := func(rep state.OpenReply, err error, deferred bool) {
		o := snfs1.CMLOpen{LSN: w.lsn, ServerVerf: verf}
		if err != nil {
			o.Open.Status = statusOf(err)
		} else {
			o.Open.OpenOK = *s.openOK(obj, w.fh, rep, deferred)
			s.reintOpens.put(b.mid, w.lsn, reintGrant{fh: w.fh, reply: rep})
		}
		obj.release()
		b.opens = append(b.opens, o)
	}
	s.tableOpen(obj, b.mid, w.fh, state.Write, func(rep state.OpenReply, err error) {
		b.mu.Lock()
		if inline {
			ready = true
			b.mu.Unlock()
			answered(rep, err, false)
			return
		}
		b.mu.Unlock()
		answered(rep, err, true)
		b.run(i+1, finish)
	})
	b.mu.Lock()
	inline = false
	r := ready
	b.mu.Unlock()
	return r
}

// openAgain answers the open of a CML_CREATE record applied before (res:
// its answer): the open its first application granted, if the table still
// counts it and the record asks for it again, not counted twice; withdrawn
// (CLOSEd, dirty: the maker stays the file's closed dirty holder) if the
// record no longer asks for it; else not granted (NFS3ERR_JUKEBOX: the
// client OPENs).
func (b *batch) openAgain(rec *snfs1.CMLRecord, res *snfs1.CMLResult) {
	s := b.s
	g, had := s.reintOpens.take(b.mid, rec.LSN)
	held := had && s.consist.HoldsWriteOpen(b.mid, g.fh)
	verf := s.consist.ServerVerifier()
	if rec.Open && held && len(res.Obj) > 0 && string(res.Obj) == string(g.fh) {
		s.reintOpens.put(b.mid, rec.LSN, g)
		b.opens = append(b.opens, snfs1.CMLOpen{LSN: rec.LSN, ServerVerf: verf,
			Open: snfs1.OpenRes{OpenOK: *s.openOK(nil, g.fh, g.reply, true)}})
		return
	}
	if held {
		if err := s.consist.Close(b.mid, g.fh, state.Write, true); err != nil {
			s.log.Debug("reintegration: withdrawing a resent record's open", "err", err)
		}
	}
	if rec.Open && len(res.Obj) > 0 {
		b.opens = append(b.opens, snfs1.CMLOpen{LSN: rec.LSN, ServerVerf: verf, Open: snfs1.OpenRes{Status: nfs3.ErrJukebox}})
	}
}
