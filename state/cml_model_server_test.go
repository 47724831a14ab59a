package state

import "fmt"

// The model's REINTEGRATE, as server/reintegrate.go applies it: one batch
// of a client at a time, its highest LSN committed as pending before its
// first record, each record checked for its permits and applied in order
// (or answered without being applied when its LSN is at or below the last
// applied, or within the prefix a crash left applied), the records made
// durable and the last applied LSN committed at the end, then the promise
// breaks, then the reply.

// cmlBatch is a batch sent by a client, being applied by the server.
type cmlBatch struct {
	c         *cmlClient
	recs      []cmlRec
	permits   map[int]uint64
	held      map[int]bool // permits the batch holds the end of (BeginBatch)
	i         int
	last      uint64 // the client's last applied LSN when the batch began
	maybe     uint64 // records up to it were applied before a crash
	applied   uint64
	wait      int  // steps the record i still waits for a third client's callbacks
	waited    bool // record i has waited
	failed    string
	begun     bool // the batch's beginning was recorded
	ghost     bool // records above ghostFrom up to maybe are taken as applied, were not, and change no name for good
	ghostFrom uint64
	keep      bool // a crash-interrupted batch goes on past this one
	changed   map[int]bool
	undo      []cmlUndo // applied, not yet durable (flushed at the end)
	atServer  bool
	epoch     uint64
	handles   map[uint64]uint64 // provisional id -> the object answered for it
	traced    map[uint64]bool   // provisional ids answered by name (provTrace)
}

// cmlUndo is one applied record's changes of names, to be lost by a crash
// before the batch's flush.
type cmlUndo struct {
	lsn uint64
	ch  []cmlNameChange
}

type cmlNameChange struct {
	d, n     int
	was, set uint64
}

// sendBatch sends the first k records of c's log, if no batch of c is out.
func (m *cmlModel) sendBatch(c *cmlClient, k int) {
	if c.inflight != nil || len(c.log) == 0 {
		return
	}
	m.cancel(c)
	if len(c.log) == 0 {
		return
	}
	if len(m.crashed) > 0 && !m.crashed[c.id] {
		return // the documented limit: held until the crashed batch is resent
	}
	// A client resends at least what it sent and got no reply to (section
	// 21.3: the check after a crash needs the whole interrupted batch).
	for k < len(c.log) && c.log[k].lsn <= c.resendTo {
		k++
	}
	recs := append([]cmlRec(nil), c.log[:min(k, len(c.log))]...)
	for _, r := range recs {
		for _, nk := range r.names() {
			if m.inBatch(nk[0], nk[1]) {
				return // the same limit: another batch being applied changes that name
			}
		}
	}
	b := &cmlBatch{c: c, recs: recs, permits: map[int]uint64{}, held: map[int]bool{}, changed: map[int]bool{}, atServer: true, epoch: m.epoch}
	for d, p := range c.permits {
		if !p.pending {
			b.permits[d] = p.id
		}
	}
	c.inflight = b
	c.sent = max(c.sent, recs[len(recs)-1].lsn)
	// The server begins it (server.beginBatch).
	for d, id := range b.permits {
		if m.p.BeginBatch(c.id, dirFID(d), id) {
			b.held[d] = true
		}
	}
	// server.beginBatch
	last, pend := m.last[c.id], m.pending[c.id]
	b.last, b.applied, b.maybe = last, last, last
	if pend > last {
		b.maybe = pend
		b.maybe = b.crashPrefix(m, m.pre[c.id])
		// Records the check takes as applied that were not: allowed only
		// where the prefixes both give the names as they are (the records
		// between changed no name for good: made and removed again).
		truth := last
		for _, r := range recs {
			if r.lsn > last && r.lsn <= pend && m.applies[[2]uint64{uint64(c.id), r.lsn}] > 0 {
				truth = max(truth, r.lsn)
			}
		}
		var img [cmlDirs]map[int]uint64
		for d := range img {
			img[d] = map[int]uint64{}
			for n, o := range m.srv[d] {
				img[d][n] = o
			}
		}
		fresh := uint64(1 << 62)
		for _, r := range recs {
			if r.lsn <= truth || r.lsn > b.maybe {
				continue
			}
			m.ghost[[2]uint64{uint64(c.id), r.lsn}] = true
			switch r.op {
			case 'c':
				fresh++
				img[r.d][r.n] = fresh
			case 'u':
				img[r.d][r.n] = 0
			case 'r':
				if r.d != r.d2 || r.n != r.n2 {
					img[r.d2][r.n2], img[r.d][r.n] = img[r.d][r.n], 0
				}
			}
		}
		old := map[uint64]bool{}
		for _, o := range m.pre[c.id] {
			old[o] = true
		}
		for d := range img {
			for n := 0; n < cmlNames; n++ {
				// An object one of those records would have made is told
				// from one an earlier record made only by the pre-image:
				// any object made by the batch will do (the limit).
				if o := img[d][n]; o > 1<<62 && m.srv[d][n] != 0 && !old[m.srv[d][n]] {
					continue
				}
				if img[d][n] != m.srv[d][n] {
					m.failf("c%d: records %d to %d taken as applied after a crash, not applied, and their effect on d%d n%d is not there", c.id, truth+1, b.maybe, d, n)
				}
			}
		}
	}
	switch hi := recs[len(recs)-1].lsn; {
	case hi > b.maybe:
		m.last[c.id], m.pending[c.id], m.pre[c.id] = b.maybe, hi, b.preImage(m, b.maybe)
		b.begun = true
	case pend > hi && b.maybe == hi:
		for k, v := range b.preImage(m, b.last) {
			m.pre[c.id][k] = v
		}
		m.last[c.id] = hi
		b.begun, b.keep = true, true
	case pend > last:
		b.begun = true
	}
	if !b.keep {
		delete(m.crashed, c.id)
	}
	m.batches = append(m.batches, b)
	m.logf("c%d REINTEGRATE %v (last %d, crash prefix to %d)", c.id, recs, last, b.maybe)
}

// cmlKey is a name: directory and name.
type cmlKey [2]int

// names returns the names r changes and what each holds after it: 0 none,
// -1 a new object, -2 the rename's source's object.
func (r cmlRec) names() []cmlKey {
	if r.op == 'r' {
		return []cmlKey{{r.d, r.n}, {r.d2, r.n2}}
	}
	return []cmlKey{{r.d, r.n}}
}

// preImage is server.batch.preImage: the objects the names of the records
// after from hold now.
func (b *cmlBatch) preImage(m *cmlModel, from uint64) map[[2]int]uint64 {
	pre := map[[2]int]uint64{}
	for _, r := range b.recs {
		if r.lsn <= from {
			continue
		}
		for _, k := range r.names() {
			if _, ok := pre[k]; !ok {
				pre[k] = m.srv[k[0]][k[1]]
			}
		}
	}
	return pre
}

// crashPrefix is server.batch.crashPrefix: of the records after last up to
// maybe, the longest prefix whose applying to the pre-image gives the
// objects the names hold now (an object a record made is one no name held
// before); if none does, the last record whose effect is there.
func (b *cmlBatch) crashPrefix(m *cmlModel, pre map[[2]int]uint64) uint64 {
	type pred struct {
		obj  uint64
		made int
	}
	var in []cmlRec
	st := map[[2]int]pred{}
	old := map[uint64]bool{}
	ok := pre != nil
	for _, r := range b.recs {
		if r.lsn <= b.last || r.lsn > b.maybe {
			continue
		}
		in = append(in, r)
		for _, k := range r.names() {
			id, found := pre[k]
			if !found {
				ok = false
			}
			if _, seen := st[k]; !seen {
				st[k] = pred{obj: id}
				old[id] = true
			}
		}
	}
	matches := func() bool {
		made := map[int]uint64{}
		for k, p := range st {
			cur := m.srv[k[0]][k[1]]
			switch {
			case p.made == 0:
				if cur != p.obj {
					return false
				}
			case cur == 0 || old[cur]:
				return false
			default:
				if v, seen := made[p.made]; seen && v != cur {
					return false
				}
				made[p.made] = cur
			}
		}
		return true
	}
	if ok {
		best, found := b.last, matches()
		for i, r := range in {
			from := cmlKey{r.d, r.n}
			if there := st[from] != (pred{}); there != (r.op != 'c') {
				break // the record would have failed here: no longer prefix applied
			}
			switch r.op {
			case 'c':
				st[from] = pred{made: i + 1}
			case 'u':
				st[from] = pred{}
			case 'r':
				if to := (cmlKey{r.d2, r.n2}); to != from {
					st[to], st[from] = st[from], pred{}
				}
			}
			if matches() {
				best, found = r.lsn, true
			}
		}
		if found {
			return best
		}
	}
	for i := len(in) - 1; i >= 0; i-- {
		r := in[i]
		var there bool
		switch r.op {
		case 'c':
			there = m.has(r.d, r.n)
		case 'u':
			there = !m.has(r.d, r.n)
		case 'r':
			there = !m.has(r.d, r.n) && m.has(r.d2, r.n2)
		}
		if there {
			return r.lsn
		}
	}
	return b.last
}

// serverStep applies the next record of a batch being applied.
func (m *cmlModel) serverStep() {
	if len(m.batches) == 0 {
		return
	}
	b := m.batches[m.r.IntN(len(m.batches))]
	if b.wait > 0 {
		b.wait--
		return
	}
	c, r := b.c, b.recs[b.i]
	key := [2]uint64{uint64(c.id), r.lsn}
	switch {
	case r.lsn <= b.last || r.lsn <= b.maybe:
		if m.applies[key] != 1 && !(m.ghost[key] && m.applies[key] == 0) {
			m.failf("c%d record %v answered as applied before; applied %d times", c.id, r, m.applies[key])
		}
		switch {
		case r.op != 'c':
		case r.lsn <= b.last && m.recMade[key].obj != 0:
			// Committed with the last applied LSN: the handle recorded
			// (none if its object is gone).
			rec := m.recMade[key]
			obj := rec.obj
			if !m.alive(obj) {
				obj = 0
			}
			m.provAnswer(b, r, obj, r.d, rec.traced)
		default:
			obj, at := m.provTrace(b, r)
			m.provAnswer(b, r, obj, at, true)
		}
	case !b.waited && m.r.IntN(3) == 0:
		// It removes a file a third client caches: it waits for that
		// client's callbacks (section 14), up to their deadline.
		b.waited, b.wait = true, 1+m.r.IntN(4)
		return
	default:
		for _, d := range r.dirs() {
			id, named := b.permits[d]
			if !named || !m.p.Holds(c.id, dirFID(d), id) {
				if b.held[d] {
					m.failf("c%d record %v refused for want of the permit on d%d its batch began under", c.id, r, d)
				}
				b.failed = fmt.Sprintf("NOPERMIT d%d", d)
				m.finish(b)
				return
			}
		}
		ok := false
		switch r.op {
		case 'c':
			ok = !m.has(r.d, r.n)
		case 'u', 'r':
			ok = m.has(r.d, r.n)
		}
		if !ok {
			b.failed = "EXIST/NOENT"
			m.finish(b)
			return
		}
		if m.applies[key]++; m.applies[key] > 1 {
			m.failf("c%d record %v applied twice", c.id, r)
		}
		u := cmlUndo{lsn: r.lsn}
		set := func(d, n int, v uint64) {
			u.ch = append(u.ch, cmlNameChange{d: d, n: n, was: m.srv[d][n], set: v})
			m.srv[d][n] = v
			delete(m.due[d], n) // superseded by this holder's change
		}
		if r.op != 'c' {
			m.provActs(c, r, m.srv[r.d][r.n])
		}
		switch r.op {
		case 'c':
			set(r.d, r.n, m.newObj())
			m.provMade(c, r, m.srv[r.d][r.n])
			m.provAnswer(b, r, m.srv[r.d][r.n], r.d, false)
		case 'u':
			set(r.d, r.n, 0)
		case 'r':
			if r.d != r.d2 || r.n != r.n2 {
				o := m.srv[r.d][r.n]
				set(r.d, r.n, 0)
				set(r.d2, r.n2, o)
			}
		}
		b.undo = append(b.undo, u)
		for _, d := range r.dirs() {
			b.changed[d] = true
		}
		m.logf("c%d applied %v", c.id, r)
	}
	b.applied = max(b.applied, r.lsn)
	b.i++
	b.waited = false
	if b.i == len(b.recs) {
		m.finish(b)
	}
}

// finish ends batch b at the server: its records made durable (one flush),
// the last applied LSN committed, the permits' ends it held carried out,
// the promises broken, then the reply.
func (m *cmlModel) finish(b *cmlBatch) {
	c := b.c
	b.undo = nil
	if b.begun { // server.batch.record
		m.last[c.id] = max(m.last[c.id], b.applied)
		for lsn, obj := range b.handles { // with the LSN (SetLastLSN's made)
			if obj != 0 && lsn <= b.applied {
				m.recMade[[2]uint64{uint64(c.id), lsn}] = cmlMade{obj: obj, traced: b.traced[lsn]}
			}
		}
		if !b.keep {
			m.pending[c.id], m.pre[c.id] = 0, nil
		}
	}
	for i, o := range m.batches {
		if o == b {
			m.batches = append(m.batches[:i], m.batches[i+1:]...)
			break
		}
	}
	b.atServer = false
	for d := range b.held {
		m.absorb(m.p.EndBatch(m.now, c.id, dirFID(d), b.permits[d]))
	}
	m.logf("c%d batch done: applied to %d, %s", c.id, b.applied, b.failed)
	m.provReply(b)
	var dirs []FileID
	for d := range b.changed {
		dirs = append(dirs, dirFID(d))
	}
	reply := func() { m.reply(b) }
	req := m.req()
	v, acts := m.d.Changed(m.now, req, c.id, true, dirs)
	if v == Wait {
		m.park(req, reply)
		m.absorb(acts)
		return
	}
	m.absorb(acts)
	reply()
}

// reply is the client receiving its batch's reply (or losing it).
func (m *cmlModel) reply(b *cmlBatch) {
	c := b.c
	if m.epoch != b.epoch || c.inflight != b {
		return
	}
	c.inflight = nil
	if m.r.IntN(8) == 0 {
		c.resendTo = max(c.resendTo, b.recs[len(b.recs)-1].lsn)
		m.logf("c%d's reply lost", c.id)
		return // the log is sent again
	}
	c.resendTo = 0
	done := 0
	for _, r := range b.recs {
		if r.lsn > b.applied {
			break
		}
		done++
	}
	c.log = c.log[done:]
	if b.failed != "" && len(c.log) > 0 {
		// The failed record is kept as a conflict copy; under a permit
		// gone, every record of its directories is.
		bad := c.log[0]
		refused := b.failed[:3] == "NOP"
		kept := c.log[:0]
		for i, r := range c.log {
			drop := i == 0
			for _, d := range r.dirs() {
				for _, bd := range bad.dirs() {
					if refused && d == bd {
						drop = true
					}
				}
			}
			if drop {
				m.provDropped(c, r)
				for _, d := range r.dirs() {
					if t := c.told[d]; t != nil {
						t.conflict = true
					}
				}
				continue
			}
			kept = append(kept, r)
		}
		c.log = kept
		if refused {
			for _, d := range bad.dirs() {
				if p := c.permits[d]; p != nil && !p.pending {
					m.endPermit(c, d, false)
				}
			}
		}
	}
	m.answerRecalls(c)
	if m.recalledAny(c) && len(c.log) > 0 {
		m.sendBatch(c, len(c.log))
	}
}

// crash is the server crashing while b is being applied: its records not
// yet flushed are lost from the end (the file system keeps a prefix of the
// changes made in order: journaled metadata).
func (b *cmlBatch) crash(m *cmlModel) {
	keep := m.r.IntN(len(b.undo) + 1)
	for i := len(b.undo) - 1; i >= keep; i-- {
		u := b.undo[i]
		for j := len(u.ch) - 1; j >= 0; j-- {
			if ch := u.ch[j]; m.srv[ch.d][ch.n] == ch.set {
				m.srv[ch.d][ch.n] = ch.was // else changed since by a local process: its own
			}
		}
		m.applies[[2]uint64{uint64(b.c.id), u.lsn}]--
		delete(m.prov.made, [2]uint64{uint64(b.c.id), u.lsn}) // never made
	}
	m.logf("c%d's batch crashed: %d of %d changes kept", b.c.id, keep, len(b.undo))
}
