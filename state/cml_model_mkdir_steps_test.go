package state

import "fmt"

// The MKDIR model's steps (TestCMLMkdirModel): the holders' changes logged
// locally, GET_PERMIT and PERMIT_RELEASE, other clients' changes and reads,
// callbacks delivered, and the holders' answers to recalls.

// logChange: c's application makes a change locally, told at once, logged.
func (m *mkModel) logChange(c *mkClient) {
	if len(c.log) >= 12 {
		return
	}
	pv := m.view(c, mkRef{obj: mkParent})
	if m.r.IntN(2) == 0 {
		// In the parent: an MKDIR, or the RMDIR of an empty directory.
		if !c.usable(mkParent) {
			return
		}
		n := m.r.IntN(mkPNames)
		rec := mkRec{op: 'm', dir: mkRef{obj: mkParent}, n: n}
		if o := pv[n]; o != 0 {
			sub := mkRef{obj: o}
			if o&(1<<62) != 0 {
				sub = mkRef{prov: o &^ (1 << 62)}
			} else if !c.usable(o) {
				return // a directory it does not hold: its emptiness unknown here
			}
			for _, x := range m.view(c, sub) {
				if x != 0 {
					return
				}
			}
			rec.op = 'd'
		}
		m.append(c, rec)
		return
	}
	// In a directory of the parent: its own permit, or (a provisional one)
	// the parent's.
	n := m.r.IntN(mkPNames)
	o := pv[n]
	if o == 0 {
		return
	}
	k := mkRef{obj: o}
	if o&(1<<62) != 0 {
		k = mkRef{prov: o &^ (1 << 62)}
		if m.impl {
			// The mount resolves it first: the log is reintegrated, and the
			// change waits for the directory's permit.
			m.send(c, len(c.log))
			return
		}
		if !c.usable(mkParent) {
			return
		}
	} else if !c.usable(o) {
		return
	}
	cn := m.r.IntN(mkCNames)
	rec := mkRec{op: 'c', dir: k, n: cn}
	if m.view(c, k)[cn] != 0 {
		rec.op = 'u'
	}
	m.append(c, rec)
}

func (m *mkModel) append(c *mkClient, rec mkRec) {
	c.lsn++
	rec.lsn = c.lsn
	c.log = append(c.log, rec)
	if c.told[rec.dir] == nil {
		c.told[rec.dir] = map[int]bool{}
	}
	c.told[rec.dir][rec.n] = rec.op == 'm' || rec.op == 'c'
	if rec.op == 'm' {
		c.told[mkRef{prov: rec.lsn}] = map[int]bool{}
	}
	m.logf("c%d logs %v", c.id, rec)
}

// getPermit is GET_PERMIT, as consist.GetPermit drives it.
func (m *mkModel) getPermit(c *mkClient, obj uint64) {
	if c.held[obj] != nil || c.recalls[obj] != nil || !m.alive(obj) {
		return
	}
	f := m.fid(obj)
	id, fresh, ok := m.p.Acquire(m.now, c.id, f, nil)
	if !ok || !fresh {
		return
	}
	cp := &mkPermit{id: id, pending: true}
	c.held[obj] = cp
	m.logf("c%d GET_PERMIT o%d id %x", c.id, obj, id)
	epoch := m.epoch
	finish := func() {
		if m.epoch != epoch || c.held[obj] != cp {
			return
		}
		if !m.p.Granted(m.now, f, id) {
			delete(c.held, obj)
			m.logf("c%d permit o%d cancelled", c.id, obj)
			return
		}
		cp.pending = false
		if k := (mkRef{obj: obj}); len(c.log) == 0 && !c.reint {
			// A fresh start there. With records, perhaps naming it by a
			// provisional id, what they were told stays, and so does what
			// they risked (logged while it had no permit, or revoked).
			c.told[k], c.conflict[k] = map[int]bool{}, false
			delete(m.revoked, [2]uint64{uint64(c.id), obj})
			if m.noPerm[obj] == c.id {
				delete(m.noPerm, obj)
			}
		}
		m.logf("c%d permit o%d granted", c.id, obj)
	}
	req := m.req()
	v, acts := m.d.Changed(m.now, req, c.id, true, []FileID{f})
	if v == Wait {
		m.park(req, finish)
		m.absorb(acts, false)
		return
	}
	m.absorb(acts, false)
	finish()
}

// release: PERMIT_RELEASE of a permit with nothing logged under it.
func (m *mkModel) release(c *mkClient) {
	for obj, p := range c.held {
		if p.pending || c.recalls[obj] != nil || c.reint || m.hasLog(c, mkRef{obj: obj}) || m.r.IntN(2) == 0 {
			continue
		}
		m.endPermit(c, obj)
		m.logf("c%d releases o%d", c.id, obj)
		m.absorb(m.p.Release(m.now, c.id, m.fid(obj), p.id), true)
		return
	}
}

// otherChange is a change through the server by a client that does not
// hold the directory's permit, or the stock client: it waits for the
// recall, is made, then waits for the promise breaks.
func (m *mkModel) otherChange(c *mkClient) {
	by := c.id
	if m.r.IntN(3) == 0 {
		by = 0
	}
	ds := m.dirs()
	dir := ds[m.r.IntN(len(ds))]
	if by != 0 && (c.held[dir] != nil || len(c.log) > 0 || c.reint) {
		// A holder logs its changes instead; a client with a log sends it
		// first (the mount's BeforeDirChange), and knows the directories
		// it made only once their replies are taken in.
		return
	}
	n := m.r.IntN(mkCNames)
	if dir == mkParent {
		n = m.r.IntN(mkPNames)
	}
	req := m.req()
	who := fmt.Sprintf("client %d's change %d", by, req)
	epoch := m.epoch
	made := func() {
		if m.epoch != epoch || !m.alive(dir) {
			return
		}
		m.see(dir, who, true)
		var set uint64
		switch o := m.names[dir][n]; {
		case o == 0:
			set = m.newObj(dir == mkParent)
		case dir == mkParent && len(m.names[o]) > 0 && m.nonEmpty(o):
			m.logf("%s: RMDIR o%d n%d: not empty", who, dir, n)
			return
		}
		m.names[dir][n] = set
		m.superseded(dir, n, nil)
		m.logf("%s of o%d n%d made: %d", who, dir, n, set)
		req2 := m.req()
		v, acts := m.d.Changed(m.now, req2, by, true, []FileID{m.fid(dir)})
		if v == Wait {
			m.park(req2, func() {})
		}
		m.absorb(acts, false)
	}
	v, acts := m.p.Changed(m.now, req, by, true, []FileID{m.fid(dir)})
	m.logf("%s of o%d asked: %v", who, dir, v)
	if v == Wait {
		m.park(req, made)
		m.absorb(acts, true)
		return
	}
	m.absorb(acts, true)
	made()
}

func (m *mkModel) nonEmpty(obj uint64) bool {
	for _, o := range m.names[obj] {
		if o != 0 {
			return true
		}
	}
	return false
}

// read is another client's READDIR of a directory it holds no permit of.
func (m *mkModel) read(c *mkClient) {
	ds := m.dirs()
	dir := ds[m.r.IntN(len(ds))]
	if c.held[dir] != nil {
		return
	}
	m.see(dir, fmt.Sprintf("client %d's read", c.id), false)
}

// deliver delivers a callback in transit, or loses it (its deadline ends it).
func (m *mkModel) deliver() {
	if len(m.calls) == 0 {
		return
	}
	i := m.r.IntN(len(m.calls))
	cb := m.calls[i]
	m.calls = append(m.calls[:i:i], m.calls[i+1:]...)
	if m.r.IntN(12) == 0 {
		m.logf("callback %v to c%d o%d lost", cb.Mode, cb.Client, m.fids[cb.File])
		return
	}
	if cb.Mode != RecallPermit {
		m.absorb(m.d.CallbackDone(m.now, cb, OK), false)
		return
	}
	m.recall(m.client(cb.Client), cb)
}

// recall is permits.recall: CB_RECALL_PERMIT served by reintegrating the
// whole log, then CB_OK; a permit not held with nothing logged is not this
// client's (STALE), decided once a reintegration in progress has taken its
// reply in (it may be the reply that grants this very permit).
func (m *mkModel) recall(c *mkClient, cb Callback) {
	obj := m.fids[cb.File]
	if c.reint && !m.rules.staleRecall {
		c.waiting = append(c.waiting, cb)
		m.logf("c%d's recall of o%d waits for its reintegration", c.id, obj)
		return
	}
	if c.held[obj] == nil && len(c.log) == 0 {
		m.logf("c%d answers the recall of o%d STALE", c.id, obj)
		m.absorb(m.p.CallbackDone(m.now, cb, Stale), true)
		return
	}
	m.logf("c%d recalled o%d", c.id, obj)
	c.recalls[obj] = &mkRecall{cb: cb, upTo: c.lsn}
	if !c.reint {
		c.recalls[obj].begun = true
		if !m.send(c, len(c.log)) {
			m.answerRecalls(c)
		}
	}
}

// answerRecalls answers, after a reintegration, the recalls whose records
// are in: the permit goes back.
func (m *mkModel) answerRecalls(c *mkClient) {
	for obj, rc := range c.recalls {
		if !rc.begun || len(c.log) > 0 && c.log[0].lsn <= rc.upTo || m.hasLog(c, mkRef{obj: obj}) {
			// Its records are not all in: those logged before it, and
			// those of the directory logged since by its provisional id
			// (the gate knew it by its handle only once the reply came).
			continue
		}
		delete(c.recalls, obj)
		if c.held[obj] != nil {
			m.endPermit(c, obj)
		}
		m.logf("c%d answers the recall of o%d", c.id, obj)
		m.absorb(m.p.CallbackDone(m.now, rc.cb, OK), true)
	}
	waiting := c.waiting
	c.waiting = nil
	for _, cb := range waiting {
		m.recall(c, cb)
	}
	if len(c.recalls) > 0 && !c.reint {
		for _, rc := range c.recalls {
			rc.begun = true
		}
		if !m.send(c, len(c.log)) {
			m.answerRecalls(c)
		}
	}
}
