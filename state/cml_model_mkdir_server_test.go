package state

import "fmt"

// The MKDIR model's REINTEGRATE (TestCMLMkdirModel), as server/reintegrate.go
// applies a batch (without crashes in its middle: cml_model_test.go checks
// those), the client's optimiser, its taking in of the reply, and server
// restarts between batches.

// mkBatch is a batch sent by a client.
type mkBatch struct {
	c        *mkClient
	recs     []mkRec
	permits  map[uint64]uint64 // directory -> the permit id the batch names
	held     map[uint64]bool   // permits the batch holds the end of (BeginBatch)
	i        int
	last     uint64
	applied  uint64
	wait     int
	waited   bool
	failed   string
	prov     map[uint64]uint64 // provisional id -> directory (made or answered in this batch)
	made     map[uint64]bool   // directories made by an earlier record of the batch
	handles  map[uint64]uint64 // MKDIR's LSN -> the directory answered (0: none)
	granted  map[uint64]uint64 // directory -> the permit the reply gives
	changed  map[uint64]bool
	epoch    uint64
	replied  bool // the reply reached the client
	old      bool // the server restarted since its reply: its permits are gone
	atServer bool
}

// cancel is the client's optimiser on records never sent (mount/cml's
// Optimize, rule 1): a CREATE and its UNLINK, an MKDIR and its RMDIR (with
// whatever lived and died inside it) cost nothing.
func (m *mkModel) cancel(c *mkClient) {
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(c.log) && !changed; i++ {
			mk := c.log[i]
			if mk.lsn <= c.sent || mk.op != 'm' && mk.op != 'c' {
				continue
			}
			inside := map[int]bool{}
			for j := i + 1; j < len(c.log); j++ {
				r := c.log[j]
				if mk.op == 'm' && r.dir == (mkRef{prov: mk.lsn}) {
					inside[j] = true
					continue
				}
				if r.dir != mk.dir || r.n != mk.n {
					continue
				}
				if r.op == 'd' || r.op == 'u' {
					if mk.op == 'm' && !m.deadInside(c, inside) {
						break
					}
					m.logf("c%d cancels %v and %v (and %d inside)", c.id, mk, r, len(inside))
					kept := c.log[:0:0]
					for k, o := range c.log {
						if k != i && k != j && !inside[k] {
							kept = append(kept, o)
						}
					}
					c.log = kept
					changed = true
				}
				break
			}
		}
	}
}

// deadInside reports whether the records in a provisional directory
// (inside: their indexes in c's log) leave nothing alive there.
func (m *mkModel) deadInside(c *mkClient, inside map[int]bool) bool {
	alive := map[int]bool{}
	for k, r := range c.log {
		if !inside[k] {
			continue
		}
		alive[r.n] = r.op == 'c'
	}
	for _, a := range alive {
		if a {
			return false
		}
	}
	return true
}

// send sends the first k records of c's log (at least what it sent before
// and got no answer to), if no batch of c is out; false if nothing to send.
func (m *mkModel) send(c *mkClient, k int) bool {
	if c.inflight != nil || c.takeIn != nil {
		return true // the reintegration in progress goes on
	}
	m.cancel(c)
	if len(c.log) == 0 {
		return false
	}
	for k < len(c.log) && c.log[k].lsn <= c.sent {
		k++
	}
	b := &mkBatch{c: c, recs: append([]mkRec(nil), c.log[:min(max(k, 1), len(c.log))]...), permits: map[uint64]uint64{},
		held: map[uint64]bool{}, prov: map[uint64]uint64{}, made: map[uint64]bool{}, handles: map[uint64]uint64{},
		granted: map[uint64]uint64{}, changed: map[uint64]bool{}, epoch: m.epoch, atServer: true}
	for obj, p := range c.held {
		if !p.pending {
			b.permits[obj] = p.id
			if m.p.BeginBatch(c.id, m.fid(obj), p.id) {
				b.held[obj] = true
			}
		}
	}
	c.inflight, c.reint = b, true
	c.sent = max(c.sent, b.recs[len(b.recs)-1].lsn)
	b.last = m.last[c.id]
	b.applied = b.last
	m.batches = append(m.batches, b)
	m.logf("c%d REINTEGRATE %v (last %d)", c.id, b.recs, b.last)
	return true
}

// ref resolves a record's directory (server.batch.ref): a provisional id
// names what an earlier record of the batch made or was answered with.
func (b *mkBatch) ref(k mkRef) (uint64, bool) {
	if k.prov == 0 {
		return k.obj, true
	}
	o, ok := b.prov[k.prov]
	return o, ok && o != 0
}

// permitted is server.batch.permitted.
func (m *mkModel) permitted(b *mkBatch, dir uint64) bool {
	if b.made[dir] {
		return !m.p.HeldByOther(b.c.id, m.fid(dir))
	}
	id, ok := b.permits[dir]
	return ok && m.p.Holds(b.c.id, m.fid(dir), id)
}

// serverStep applies the next record of a batch being applied.
func (m *mkModel) serverStep() {
	if len(m.batches) == 0 {
		return
	}
	b := m.batches[m.r.IntN(len(m.batches))]
	if b.wait > 0 {
		b.wait--
		return
	}
	c, r := b.c, b.recs[b.i]
	switch {
	case r.lsn <= b.last:
		// Applied before (server.batch.again): an MKDIR answered with the
		// handle recorded (none once gone) and the permit still held.
		if r.op == 'm' {
			obj := m.made[[2]uint64{uint64(c.id), r.lsn}]
			if obj != 0 && !m.alive(obj) {
				obj = 0
			}
			b.handles[r.lsn], b.prov[r.lsn] = obj, obj
			if obj != 0 {
				b.made[obj] = true
				if id := m.p.HeldID(c.id, m.fid(obj)); id != 0 {
					b.granted[obj] = id
					m.holdNewEnd(b, obj, id)
				}
			}
		}
	case !b.waited && r.op != 'm' && m.r.IntN(4) == 0:
		// Another client's callbacks first (section 14), up to their deadline.
		b.waited, b.wait = true, 1+m.r.IntN(3)
		return
	default:
		dir, ok := b.ref(r.dir)
		switch {
		case !ok:
			b.failed = "BADHANDLE"
		case !m.alive(dir):
			b.failed = "STALE"
		case !m.permitted(b, dir):
			if b.held[dir] {
				m.failf("c%d record %v refused for want of the permit on o%d its batch began under", c.id, r, dir)
			}
			b.failed = fmt.Sprintf("NOPERMIT o%d", dir)
		}
		if b.failed == "" {
			b.failed = m.apply(b, r, dir)
		}
		if b.failed != "" {
			m.finish(b)
			return
		}
		b.changed[dir] = true
	}
	b.applied = max(b.applied, r.lsn)
	b.i++
	b.waited = false
	if b.i == len(b.recs) {
		m.finish(b)
	}
}

// holdNewEnd: unless freeNewEnds, the batch holds the end of the permit id
// on obj its MKDIR record gives (granted now, or answered again), as of
// the permits it names.
func (m *mkModel) holdNewEnd(b *mkBatch, obj, id uint64) {
	if !m.rules.freeNewEnds && !b.held[obj] && m.p.BeginBatch(b.c.id, m.fid(obj), id) {
		b.permits[obj], b.held[obj] = id, true
	}
}

// apply makes record r of b in dir; "" or why it failed.
func (m *mkModel) apply(b *mkBatch, r mkRec, dir uint64) string {
	c := b.c
	o := m.names[dir][r.n]
	switch r.op {
	case 'm', 'c':
		if o != 0 {
			return "EXIST"
		}
		obj := m.newObj(r.op == 'm')
		m.names[dir][r.n] = obj
		if r.op == 'm' {
			key := [2]uint64{uint64(c.id), r.lsn}
			if prev, ok := m.made[key]; ok {
				m.failf("c%d: provisional %d made twice: o%d and o%d", c.id, r.lsn, prev, obj)
			}
			m.made[key] = obj
			b.handles[r.lsn], b.prov[r.lsn], b.made[obj] = obj, obj, true
			if id := m.p.GrantNew(m.now, c.id, m.fid(obj), nil); id != 0 {
				b.granted[obj] = id
				m.holdNewEnd(b, obj, id)
			} else {
				m.noPerm[obj] = c.id // a bound: what it was told there is not held for it
			}
		}
	case 'd', 'u':
		if o == 0 || (r.op == 'd') != m.isDir[o] {
			return "NOENT"
		}
		if r.op == 'd' && m.nonEmpty(o) {
			return "NOTEMPTY"
		}
		m.names[dir][r.n] = 0
	}
	if r.dir.prov != 0 {
		// A record in a directory made locally acts on the directory its
		// MKDIR made.
		if want := m.made[[2]uint64{uint64(c.id), r.dir.prov}]; want != dir {
			m.failf("c%d record %v acts on o%d; its MKDIR made o%d", c.id, r, dir, want)
		}
	}
	m.superseded(dir, r.n, c)
	m.logf("c%d applied %v in o%d", c.id, r, dir)
	return ""
}

// finish ends batch b at the server: the last applied LSN committed, the
// permits' ends it held carried out, the promises broken, then the reply.
func (m *mkModel) finish(b *mkBatch) {
	c := b.c
	m.last[c.id] = max(m.last[c.id], b.applied)
	for i, o := range m.batches {
		if o == b {
			m.batches = append(m.batches[:i], m.batches[i+1:]...)
			break
		}
	}
	b.atServer = false
	for obj := range b.held {
		m.absorb(m.p.EndBatch(m.now, c.id, m.fid(obj), b.permits[obj]), true)
	}
	m.logf("c%d batch done: applied to %d %s", c.id, b.applied, b.failed)
	var dirs []FileID
	for d := range b.changed {
		dirs = append(dirs, m.fid(d))
	}
	reply := func() {
		if m.epoch == b.epoch && c.inflight == b {
			b.replied = true
		}
	}
	req := m.req()
	v, acts := m.d.Changed(m.now, req, c.id, true, dirs)
	if v == Wait {
		m.park(req, reply)
		m.absorb(acts, false)
		return
	}
	m.absorb(acts, false)
	reply()
}

// takeReply is the client taking in its reply in permits.reintegrate's two
// steps: cml.Log.Reintegrate drops the records answered and learns the
// handles, then the permits the reply granted are held. A reply may be
// lost instead: the batch is sent again as a new call.
func (m *mkModel) takeReply(c *mkClient) {
	if b := c.takeIn; b != nil {
		c.takeIn = nil
		for obj, id := range b.granted {
			if b.old && !m.rules.oldPermits {
				break // of an earlier server start (permits.reintegrate checks)
			}
			if c.held[obj] == nil {
				c.held[obj] = &mkPermit{id: id}
				m.logf("c%d holds o%d's permit %x (its MKDIR's)", c.id, obj, id)
			}
		}
		if b.failed != "" && len(c.log) > 0 {
			m.send(c, len(c.log)) // the loop after a refused record: the rest
			return
		}
		c.reint = false
		m.answerRecalls(c)
		return
	}
	b := c.inflight
	if b == nil || !b.replied {
		return
	}
	c.inflight = nil
	if m.r.IntN(8) == 0 {
		m.logf("c%d's reply lost", c.id)
		c.reint = false
		m.answerRecalls(c) // recalls wait for a reintegration that ends well
		return
	}
	c.takeIn = b
	done := 0
	for _, r := range b.recs {
		if r.lsn > b.applied {
			break
		}
		done++
	}
	c.log = c.log[done:]
	for lsn, obj := range b.handles {
		m.learn(c, lsn, obj)
	}
	if b.failed != "" && len(c.log) > 0 {
		bad := c.log[0]
		c.log = c.log[1:]
		c.conflict[bad.dir] = true
		if bad.op == 'm' {
			m.learn(c, bad.lsn, 0)
		}
		m.logf("c%d keeps %v as a conflict (%s)", c.id, bad, b.failed)
	}
}

// learn: the MKDIR of LSN lsn made obj (0: none, or none any more): the
// records naming it by its provisional id name obj, and what the
// application was told of it is told of obj.
func (m *mkModel) learn(c *mkClient, lsn, obj uint64) {
	pk := mkRef{prov: lsn}
	ok := mkRef{obj: obj}
	if obj == 0 {
		c.conflict[pk] = true
		return
	}
	for i := range c.log {
		if c.log[i].dir == pk {
			c.log[i].dir = ok
		}
	}
	if t := c.told[pk]; t != nil {
		if c.told[ok] == nil {
			c.told[ok] = map[int]bool{}
		}
		for n, v := range t {
			c.told[ok][n] = v
		}
		delete(c.told, pk)
	}
	if m.revoked[[2]uint64{uint64(c.id), obj}] {
		c.conflict[pk] = true
	}
	if c.conflict[pk] {
		c.conflict[ok] = true
		delete(c.conflict, pk)
	}
}

// restart is a server restart between batches: tables new, permits and
// promises gone; the clients drop their permits (a new server_verf) and
// their records in the log may be refused (conflicts).
func (m *mkModel) restart() {
	m.logf("server restart")
	m.calls, m.ready = nil, nil
	m.parked = map[ReqID]func(){}
	m.newTables()
	for _, c := range m.clients[1:] {
		for obj := range c.held {
			delete(c.held, obj)
			c.conflict[mkRef{obj: obj}] = true
		}
		for k := range c.told {
			c.conflict[k] = true
		}
		c.recalls, c.waiting = map[uint64]*mkRecall{}, nil
		if c.takeIn != nil {
			c.takeIn.old = true
		}
		if c.inflight != nil {
			c.inflight.old = true
		}
		if c.inflight != nil && !c.inflight.replied {
			c.inflight, c.reint = nil, false // no reply: sent again
		}
	}
}
