package state

import "fmt"

// The model's other clients' and the network's steps (TestCMLModel):
// listings, callbacks delivered or lost, releases, server restarts.

// listStep is a LISTDIR of c in three steps: the promise, the read, the end.
func (m *cmlModel) listStep(c *cmlClient, d int) {
	if c.permits[d] != nil || m.hasLog(c, d) {
		return
	}
	if len(c.lists) > 0 && m.r.IntN(2) == 0 {
		i := m.r.IntN(len(c.lists))
		l := c.lists[i]
		if l.read == nil {
			m.see(l.d, fmt.Sprintf("client %d's listing", c.id))
			l.read = map[int]bool{}
			for n := range m.srv[l.d] {
				l.read[n] = m.has(l.d, n)
			}
			return
		}
		c.lists = append(c.lists[:i], c.lists[i+1:]...)
		ok, acts := m.d.EndList(m.now, l.tok, nil)
		m.absorb(acts)
		if ok {
			c.cache[l.d] = l.read
			m.logf("c%d caches d%d %v", c.id, l.d, l.read)
		}
		return
	}
	tok, ok := m.d.BeginList(m.now, c.id, dirFID(d), nil)
	if !ok {
		return
	}
	if m.p.HeldByOther(c.id, dirFID(d)) { // consist.BeginList
		m.absorb(m.d.FailList(m.now, tok))
		return
	}
	c.lists = append(c.lists, &cmlList{d: d, tok: tok})
}

// deliver delivers a callback in transit, or loses it.
func (m *cmlModel) deliver() {
	if len(m.calls) == 0 {
		return
	}
	i := m.r.IntN(len(m.calls))
	cb := m.calls[i]
	m.calls = append(m.calls[:i:i], m.calls[i+1:]...)
	c, d := m.client(cb.Client), dirOfFID(cb.File)
	if m.r.IntN(10) == 0 {
		m.logf("callback %v to c%d d%d lost", cb.Mode, cb.Client, d)
		return // its deadline ends it
	}
	if cb.Mode == Invalidate {
		delete(c.cache, d)
		m.absorb(m.d.CallbackDone(m.now, cb, OK))
		return
	}
	p := c.permits[d]
	if p == nil || p.pending {
		m.absorb(m.p.CallbackDone(m.now, cb, OK))
		return
	}
	m.logf("c%d recalled d%d", c.id, d)
	p.recalled = &cb
	if c.inflight == nil {
		m.sendBatch(c, len(c.log))
	}
	m.answerRecalls(c)
}

// answerRecalls answers the recalls of c whose directories have nothing
// left in the log (it reintegrated them): the permit goes back.
func (m *cmlModel) answerRecalls(c *cmlClient) {
	if c.inflight != nil {
		return
	}
	for d, p := range c.permits {
		if p.recalled == nil || m.hasLog(c, d) {
			continue
		}
		cb := *p.recalled
		m.endPermit(c, d, true)
		m.logf("c%d answers the recall of d%d", c.id, d)
		m.absorb(m.p.CallbackDone(m.now, cb, OK))
	}
}

// release: a holder with nothing logged of d gives its permit back.
func (m *cmlModel) release(c *cmlClient, d int) {
	p := c.permits[d]
	if p == nil || p.pending || c.inflight != nil || m.hasLog(c, d) {
		return
	}
	m.endPermit(c, d, true)
	m.logf("c%d releases d%d", c.id, d)
	m.absorb(m.p.Release(m.now, c.id, dirFID(d), p.id))
}

// restart is a server crash and restart: what a batch in progress had not
// flushed is lost, tables are new, clients drop promises and permits.
func (m *cmlModel) restart() {
	m.logf("server restart")
	for _, b := range m.batches {
		b.crash(m)
		m.crashed[b.c.id] = true
	}
	m.batches = nil
	for id, p := range m.pending {
		if p > m.last[id] {
			m.crashed[id] = true
		}
	}
	m.calls, m.ready = nil, nil
	m.parked, m.exps = map[ReqID]func(){}, map[ReqID]*cmlExp{}
	m.newTables()
	for _, c := range m.clients[1:] {
		c.cache, c.lists = map[int]map[int]bool{}, nil
		for d, cp := range c.permits {
			// Reclaimed (RECLAIM_PERMIT, docs/protocol.md section 21.9)
			// if held with a log of the directory: nobody else changes it
			// before the holder's reclaim (the grace period's gate, taken
			// here as the reclaim coming at once), so what the holder's
			// application was told stays due. Otherwise it ends with the
			// server.
			if !cp.pending && m.hasLog(c, d) {
				if id := m.p.Reclaim(m.now, c.id, dirFID(d), nil); id != 0 {
					cp.id, cp.recalled = id, nil
					m.logf("c%d RECLAIM_PERMIT d%d id %x", c.id, d, id)
					continue
				}
			}
			m.endPermit(c, d, false)
		}
		for d, t := range c.told {
			if !m.hasLog(c, d) {
				delete(c.told, d)
			} else if c.permits[d] == nil {
				t.conflict = true // a permit lost: the log may be refused
			}
		}
		if c.inflight != nil {
			c.resendTo = max(c.resendTo, c.inflight.recs[len(c.inflight.recs)-1].lsn)
		}
		c.inflight = nil // its reply never comes: sent again
	}
	// A client whose batch the crash interrupted asks for its permits again
	// and resends its log at once: the documented limit (section 21.3) is
	// a change by anyone else of the batch's names before that resend.
	for _, c := range m.clients[1:] {
		if !m.crashed[c.id] {
			continue
		}
		for d := 0; d < cmlDirs; d++ {
			if m.hasLog(c, d) {
				m.getPermit(c, d)
			}
		}
		m.sendBatch(c, 1+m.r.IntN(len(c.log)+1))
	}
}
