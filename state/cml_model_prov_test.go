package state

// The model's provisional objects (TestCMLModel; docs/protocol.md section
// 21, docs/mount.md "provisional object"): every create a holder logs makes
// a provisional object whose id is the record's LSN, and the holder's later
// unlinks and renames of that name act on it. As the real client (mount/cml,
// mount/cachemgr) sends them, later records name the object by its
// directory and name (a change inside a directory made locally is resolved
// first, so no record names a provisional directory), and the client's
// optimiser cancels a create and its unlink before they are sent.
//
// Checked on every step, besides the name invariants:
//   - each provisional id is made into at most one server object, across
//     resends and restarts;
//   - a reply answers an id with the object its making record made (none
//     only when that object is gone), the same object in every reply;
//   - a record acting on a provisional object acts on the object its making
//     record made, unless that record was refused, failed or cancelled, or
//     the name was changed by someone else since (a conflict).

// cmlMade is a handle the server recorded with the last applied LSN
// (consist's made handles): the object it answered, and whether it found
// it by name (provTrace: a record the check after a crash found applied).
type cmlMade struct {
	obj    uint64
	traced bool
}

// cmlProv is the model's provisional-object bookkeeping.
type cmlProv struct {
	made     map[[2]uint64]uint64 // (client, id) -> the object its record made
	answered map[[2]uint64]uint64 // (client, id) -> the object a reply gave
	failed   map[[2]uint64]bool   // making records refused, failed or cancelled
}

func newCMLProv() cmlProv {
	return cmlProv{made: map[[2]uint64]uint64{}, answered: map[[2]uint64]uint64{}, failed: map[[2]uint64]bool{}}
}

// localSubj returns the provisional id of the object d/n holds in c's view
// (0: a server object, or none).
func (m *cmlModel) localSubj(c *cmlClient, d, n int) uint64 {
	var subj uint64
	for _, r := range c.log {
		switch {
		case r.op == 'c' && r.d == d && r.n == n:
			subj = r.lsn
		case r.op == 'u' && r.d == d && r.n == n:
			subj = 0
		case r.op == 'r':
			if r.d == d && r.n == n {
				subj = 0
			}
			if r.d2 == d && r.n2 == n {
				subj = r.subj
			}
		}
	}
	return subj
}

// cancel is the client's optimiser on records never sent: a create whose
// object is unlinked with no record of it between costs nothing, both are
// dropped (mount/cml's Optimize, rule 1, in its simplest case).
func (m *cmlModel) cancel(c *cmlClient) {
	for i := 0; i < len(c.log); i++ {
		mk := c.log[i]
		if mk.op != 'c' || mk.lsn <= c.sent {
			continue
		}
		for j := i + 1; j < len(c.log); j++ {
			r := c.log[j]
			if r.subj != mk.lsn {
				continue
			}
			if r.op == 'u' {
				m.logf("c%d cancels %v and %v", c.id, mk, r)
				m.prov.failed[[2]uint64{uint64(c.id), mk.lsn}] = true
				c.log = append(c.log[:j:j], c.log[j+1:]...)
				c.log = append(c.log[:i:i], c.log[i+1:]...)
				i--
			}
			break
		}
	}
}

// provTrace is the server's answer for a making record r of b found
// applied by the check after a crash, its handle not recorded
// (server.batch.again, applied1Ref): its name followed through the batch's
// renames applied before, none once removed or replaced.
func (m *cmlModel) provTrace(b *cmlBatch, r cmlRec) (uint64, int) {
	d, n := r.d, r.n
	hi := max(b.last, b.maybe)
	for _, o := range b.recs {
		if o.lsn <= r.lsn || o.lsn > hi {
			continue
		}
		switch {
		case o.op == 'r' && o.d == d && o.n == n:
			d, n = o.d2, o.n2
		case o.op == 'r' && o.d2 == d && o.n2 == n, o.op == 'u' && o.d == d && o.n == n:
			return 0, d
		}
	}
	return m.srv[d][n], d
}

// alive reports whether object o is named on the server.
func (m *cmlModel) alive(o uint64) bool {
	for d := range m.srv {
		for _, v := range m.srv[d] {
			if v == o {
				return true
			}
		}
	}
	return false
}

// provAnswer records the object a batch answers for the making record r
// (traced: by its name, provTrace).
func (m *cmlModel) provAnswer(b *cmlBatch, r cmlRec, obj uint64, at int, traced bool) {
	key := [2]uint64{uint64(b.c.id), r.lsn}
	if b.handles == nil {
		b.handles = map[uint64]uint64{}
	}
	b.handles[r.lsn] = obj
	if traced {
		if b.traced == nil {
			b.traced = map[uint64]bool{}
		}
		b.traced[r.lsn] = true
	}
	if m.ghost[key] {
		return // taken as applied after a crash, not applied: the limit
	}
	for _, d := range []int{r.d, at} {
		if t := b.c.told[d]; traced && (t == nil || t.conflict) {
			// The limit, for a record the check after a crash found
			// applied (its handle not recorded): the holder's permit
			// there ended (revoked, or a server restart) or a local
			// process changed the directory since the object was made;
			// the server answers it by the name it traces, and that
			// name may hold someone else's object now. The holder keeps
			// a conflict there.
			delete(b.handles, r.lsn)
			return
		}
	}
	made, ok := m.prov.made[key]
	switch {
	case !ok && obj != 0:
		m.failf("c%d: provisional %d answered with object %d; its record made none", b.c.id, r.lsn, obj)
	case obj != 0 && obj != made:
		m.failf("c%d: provisional %d answered with object %d; its record made %d", b.c.id, r.lsn, obj, made)
	case ok && obj == 0 && m.alive(made):
		m.failf("c%d: provisional %d answered with no object; its object %d is still there", b.c.id, r.lsn, made)
	}
}

// provMade records the object a making record made, once.
func (m *cmlModel) provMade(c *cmlClient, r cmlRec, obj uint64) {
	key := [2]uint64{uint64(c.id), r.lsn}
	if o, ok := m.prov.made[key]; ok {
		m.failf("c%d: provisional %d made twice: objects %d and %d", c.id, r.lsn, o, obj)
	}
	m.prov.made[key] = obj
}

// provActs checks a record r of c acting on its provisional object finds it
// at its name (obj: what the name holds when r is applied).
func (m *cmlModel) provActs(c *cmlClient, r cmlRec, obj uint64) {
	if r.subj == 0 {
		return
	}
	key := [2]uint64{uint64(c.id), r.subj}
	if t := c.told[r.d]; m.prov.failed[key] || m.ghost[key] || t != nil && t.conflict {
		return // by name, on whatever holds it: a conflict the holder keeps
	}
	made, ok := m.prov.made[key]
	if !ok || made != obj {
		m.failf("c%d record %v acts on object %d; its provisional %d is object %d (made %v)", c.id, r, obj, r.subj, made, ok)
	}
}

// provReply checks the ids a reply answers against every earlier reply,
// and records what c learns.
func (m *cmlModel) provReply(b *cmlBatch) {
	for lsn, obj := range b.handles {
		if lsn > b.applied {
			continue
		}
		key := [2]uint64{uint64(b.c.id), lsn}
		if m.ghost[key] {
			continue
		}
		if prev, ok := m.prov.answered[key]; ok && obj != 0 && prev != 0 && prev != obj {
			m.failf("c%d: provisional %d answered with object %d, before with %d", b.c.id, lsn, obj, prev)
		}
		if obj != 0 {
			m.prov.answered[key] = obj
		}
	}
}

// provDropped: the client drops r from its log unapplied (refused, failed).
func (m *cmlModel) provDropped(c *cmlClient, r cmlRec) {
	if r.op == 'c' {
		m.prov.failed[[2]uint64{uint64(c.id), r.lsn}] = true
	}
}
