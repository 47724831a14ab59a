package state

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCMLMkdirModel checks directories made under write-back permits
// (docs/protocol.md section 21.3 "MKDIR", docs/mount.md "The mount's side"):
// seeded random interleavings of two protocol clients and a stock NFSv3
// client over a parent directory of three names, each a directory of two
// names, driving the real tables (Permits, Dirs) as consist does, with a
// model of the server's REINTEGRATE (server/reintegrate.go: the permit check
// per record, a directory made by an earlier record of the batch needing
// none while nobody else holds its permit, the new directory's permit
// granted at its MKDIR, a resent MKDIR answered with the handle recorded
// and the permit its client still holds) and of the mount's client
// (mount/cachemgr/permits.go, permitmake.go): MKDIR made locally as a
// provisional directory, RMDIR of it cancelling it in the optimiser with
// whatever lived and died inside it, changes in it either logged naming it
// by its provisional id (what the protocol allows: any client) or, as the
// mount does, only once it is resolved (the log reintegrated first, then
// changed under the permit its MKDIR obtained), the reply taken in in two
// steps as permits.reintegrate does (the log's records first, then the
// permits the reply granted), and recalls served by reintegrating the whole
// log before CB_OK (a recall of a permit not held, with nothing logged,
// answered STALE only once a reintegration in progress is over). Replies
// may be lost (the batch is sent again as a new
// call), callbacks delivered in any order, lost or past their deadline, and
// the server may restart between batches.
//
// Checked on every step:
//   - a change by anyone but a permit's holder, when it is made, finds every
//     name the holder's application was told of in that directory as told
//     (present or removed), including the names in a directory it made
//     (told under the parent's permit, then under its own), unless a record
//     of the holder's there was refused or its permit revoked or lost to a
//     restart (conflict copies), or the directory got no permit (a bound);
//   - another client's read of a directory whose permit ended cleanly finds
//     every name its holder's application was told of as told;
//   - a client believes it holds a permit only while the server's table
//     holds it, or it was revoked (its recall unanswered in time): never
//     one the table ended on the client's own answer;
//   - a provisional directory is made at most once, and the records in it
//     act on the directory its MKDIR made.
func TestCMLMkdirModel(t *testing.T) {
	seeds := uint64(300)
	if s := os.Getenv("SNFS_MODEL_SEEDS"); s != "" && !testing.Short() {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SNFS_MODEL_SEEDS: %v", err)
		}
		seeds = n
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		if err := mkModelRun(seed, 300, mkRules{}); err != nil {
			t.Fatal(err)
		}
	}
}

// mkRules are the mount's rules before its fixes, which the model finds.
type mkRules struct {
	// staleRecall: a recall of a permit not held with an empty log is
	// answered STALE at once, even while a reintegration takes its reply in.
	staleRecall bool
	// oldPermits: the permits a reply granted are held even when the
	// server restarted between the reply and their taking in.
	oldPermits bool
	// freeNewEnds: a batch does not hold the end of the permits its MKDIR
	// records give (granted, or answered again to a resend), as it does of
	// those it names: their recall can pass its deadline while that batch
	// is still being applied, and the permit is revoked
	// (server/reintegrate.go before holdNew).
	freeNewEnds bool
}

// TestCMLMkdirModelStaleRecall: the model finds the defect the mount had
// (permits.recall before it waited for a reintegration in progress): a recall
// of the permit an MKDIR obtained, delivered after the reply's records were
// taken into the log and before its permits were, was answered STALE (no
// permit held, the log empty), the server ended the permit, and the mount
// then held it and made changes under it that others did not wait for.
func TestCMLMkdirModelStaleRecall(t *testing.T) {
	for seed := uint64(1); seed <= 3000; seed++ {
		if err := mkModelRun(seed, 300, mkRules{staleRecall: true}); err != nil {
			if !strings.Contains(err.Error(), "answers the recall of") || !strings.Contains(err.Error(), "ended with no revocation") {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("the recall rule before the fix: no seed found its defect")
}

// TestCMLMkdirModelOldPermits: the model finds the defect the mount had
// (permits.reintegrate took in the permits of a reply whatever happened
// since): a server restart between a REINTEGRATE's reply and the taking in
// of the permit its MKDIR obtained, which the restart had ended, left the
// mount holding it (serverRestarted had already forgotten the others).
func TestCMLMkdirModelOldPermits(t *testing.T) {
	for seed := uint64(1); seed <= 3000; seed++ {
		if err := mkModelRun(seed, 300, mkRules{oldPermits: true}); err != nil {
			if !strings.Contains(err.Error(), "server restart") || !strings.Contains(err.Error(), "ended with no revocation") {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("the rule before the fix: no seed found its defect")
}

// TestCMLMkdirModelNewPermitEnds: a permit an MKDIR obtained is revoked
// while the batch that granted it is still being applied (a later record
// waits for a third client's callbacks, another client changes the new
// directory meanwhile, and the holder cannot answer a recall of a permit
// it learns of only from the reply), which fences the holder's callback
// path, and the reply then gives it the revoked permit: its later changes
// there are refused. The server had not held the end of the permits its
// MKDIRs grant, as it does of those the batch names (freeNewEnds); the
// model checks that holding them (server/reintegrate.go holdNew) revokes
// none.
func TestCMLMkdirModelNewPermitEnds(t *testing.T) {
	found := 0
	for seed := uint64(1); seed <= 150; seed++ {
		n, err := mkModelRunN(seed, 300, mkRules{freeNewEnds: true})
		if err != nil {
			t.Fatal(err)
		}
		found += n
		if n, err = mkModelRunN(seed, 300, mkRules{}); err != nil || n != 0 {
			t.Fatalf("holding the new permits' ends: %d revoked in their batch, %v", n, err)
		}
	}
	if found == 0 {
		t.Fatal("no seed revoked a permit in the batch that granted it: the model no longer reaches the case")
	}
	t.Logf("permits revoked in the batch that granted them (the server before holdNew): %d in 150 seeds", found)
}

// FuzzCMLMkdirModel runs the model from any seed.
func FuzzCMLMkdirModel(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 4} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		if err := mkModelRun(seed, 300, mkRules{}); err != nil {
			t.Fatal(err)
		}
	})
}

const (
	mkClients = 2
	mkPNames  = 3         // names of the parent: directories
	mkCNames  = 2         // names of a directory made in it: files
	mkParent  = uint64(1) // the parent directory's object
)

// mkRef names a directory in a record: a server object, or the provisional
// id of a directory an earlier record of the log makes.
type mkRef struct{ obj, prov uint64 }

func (r mkRef) String() string {
	if r.prov != 0 {
		return fmt.Sprintf("p%d", r.prov)
	}
	return fmt.Sprintf("o%d", r.obj)
}

// mkRec is a log record: 'm' MKDIR (its provisional id is its LSN), 'd'
// RMDIR, 'c' CREATE, 'u' UNLINK of dir/n.
type mkRec struct {
	lsn uint64
	op  byte
	dir mkRef
	n   int
}

func (r mkRec) String() string { return fmt.Sprintf("%d:%c %v/n%d", r.lsn, r.op, r.dir, r.n) }

type mkPermit struct {
	id      uint64
	pending bool
}

// mkRecall is a recall being served: answered once a reintegration begun
// after it has ended with no record up to upTo left.
type mkRecall struct {
	cb    Callback
	upTo  uint64
	begun bool // a reintegration begun after the recall arrived
}

type mkClient struct {
	id        ClientID
	held      map[uint64]*mkPermit   // by directory object
	told      map[mkRef]map[int]bool // names its application was told of, by directory
	conflict  map[mkRef]bool         // a record there refused, or the permit lost: conflict copies
	log       []mkRec
	lsn, sent uint64
	inflight  *mkBatch // sent, its records not yet taken in
	takeIn    *mkBatch // its records taken in, its permits not yet (permits.reintegrate)
	reint     bool     // a reintegration runs (p.reint held): from the first send to the end of takeIn
	recalls   map[uint64]*mkRecall
	waiting   []Callback // recalls waiting for the reintegration in progress
}

type mkModel struct {
	seed  uint64
	r     *rand.Rand
	trace []string
	err   error
	impl  bool // the mount's rule: no record names a provisional directory
	rules mkRules

	names   map[uint64]map[int]uint64 // directory object -> name -> object (0: none)
	isDir   map[uint64]bool
	objs    uint64
	fids    map[FileID]uint64
	last    map[ClientID]uint64     // durable: last applied LSN
	made    map[[2]uint64]uint64    // durable: (client, LSN) -> the directory its MKDIR made
	noPerm  map[uint64]ClientID     // directories their MKDIR got no permit for (a bound): their maker
	due     map[uint64]map[int]bool // told by ended permits, as a read must find them
	revoked map[[2]uint64]bool      // (client, directory): a permit revoked, the client perhaps unaware
	// newRevoked counts the permits revoked while the batch whose MKDIR
	// obtained them was still being applied.
	newRevoked int
	epoch      uint64

	cmlTables
	batches []*mkBatch

	clients [mkClients + 1]*mkClient
}

func (m *mkModel) fid(obj uint64) FileID {
	f := fid(1000 + int(obj))
	m.fids[f] = obj
	return f
}

func (m *mkModel) failf(format string, a ...any) {
	if m.err == nil {
		tr := m.trace
		if len(tr) > 60 {
			tr = tr[len(tr)-60:]
		}
		m.err = fmt.Errorf("seed %d (impl %v): %s\nlast steps:\n  %s", m.seed, m.impl, fmt.Sprintf(format, a...), strings.Join(tr, "\n  "))
	}
}

func (m *mkModel) logf(format string, a ...any) {
	m.trace = append(m.trace, fmt.Sprintf("%s ", m.now.Sub(t0))+fmt.Sprintf(format, a...))
}

func (m *mkModel) newTables() {
	m.epoch++
	m.d = NewDirs(DirConfig{MaxPerClient: 4, MaxListed: 8, CallbackTimeout: time.Second}, m.now)
	m.p = NewPermits(PermitConfig{MaxPerClient: 3, MaxPermits: 4, CallbackTimeout: time.Second, IDBase: m.epoch << 32}, m.now)
}

// absorb carries out actions of either table (permits: the permits table's).
func (m *mkModel) absorb(acts []Action, permits bool) {
	for _, a := range acts {
		if m.carry(a, m.failf) || a.Kind != ActFence || !permits {
			continue
		}
		// A recall past its deadline or failed: the permit is revoked.
		obj := m.fids[a.File]
		for _, b := range m.batches {
			if b.c.id == a.Client && b.granted[obj] != 0 {
				m.newRevoked++
				m.logf("c%d's permit on o%d revoked while the batch that granted it is applied", a.Client, obj)
			}
		}
		if c := m.client(a.Client); c != nil {
			// Perhaps an MKDIR's permit whose reply it has not taken in
			// yet: it learns of the revocation when refused.
			m.revoked[[2]uint64{uint64(c.id), obj}] = true
			c.conflict[mkRef{obj: obj}] = true
			m.logf("c%d's permit on o%d revoked", c.id, obj)
		}
	}
}

func (m *mkModel) runReady() {
	for len(m.ready) > 0 && m.err == nil {
		req := m.ready[0]
		m.ready = m.ready[1:]
		fn := m.parked[req]
		delete(m.parked, req)
		fn()
	}
}

func (m *mkModel) client(c ClientID) *mkClient {
	if c < 1 || int(c) > mkClients {
		return nil
	}
	return m.clients[c]
}

func (m *mkModel) newObj(dir bool) uint64 {
	m.objs++
	if dir {
		m.isDir[m.objs] = true
		m.names[m.objs] = map[int]uint64{}
	}
	return m.objs
}

// dirs returns the directories on the server (named, or the parent).
func (m *mkModel) dirs() []uint64 {
	out := []uint64{mkParent}
	for n := 0; n < mkPNames; n++ {
		if o := m.names[mkParent][n]; o != 0 {
			out = append(out, o)
		}
	}
	return out
}

func (m *mkModel) alive(obj uint64) bool {
	if obj == mkParent {
		return true
	}
	for _, o := range m.names[mkParent] {
		if o == obj {
			return true
		}
	}
	return false
}

func mkModelRun(seed uint64, steps int, rules mkRules) error {
	_, err := mkModelRunN(seed, steps, rules)
	return err
}

// mkModelRunN is mkModelRun, also returning how many permits an MKDIR
// obtained were revoked while its batch was being applied.
func mkModelRunN(seed uint64, steps int, rules mkRules) (int, error) {
	m := &mkModel{seed: seed, r: rand.New(rand.NewPCG(seed, 37)), cmlTables: cmlTables{now: t0, parked: map[ReqID]func(){}}, impl: seed%2 == 0, rules: rules,
		names: map[uint64]map[int]uint64{}, isDir: map[uint64]bool{}, fids: map[FileID]uint64{},
		last: map[ClientID]uint64{}, made: map[[2]uint64]uint64{}, noPerm: map[uint64]ClientID{},
		due: map[uint64]map[int]bool{}, revoked: map[[2]uint64]bool{}}
	m.newObj(true) // the parent
	for i := 1; i <= mkClients; i++ {
		m.clients[i] = &mkClient{id: ClientID(i), held: map[uint64]*mkPermit{}, told: map[mkRef]map[int]bool{},
			conflict: map[mkRef]bool{}, recalls: map[uint64]*mkRecall{}}
	}
	m.newTables()
	withRestart := seed%3 != 0
	for step := 0; step < steps && m.err == nil; step++ {
		c := m.clients[1+m.r.IntN(mkClients)]
		switch k := m.r.IntN(22); {
		case k < 2:
			ds := m.dirs()
			m.getPermit(c, ds[m.r.IntN(len(ds))])
		case k < 8:
			m.logChange(c)
		case k < 9:
			m.send(c, 1+m.r.IntN(4))
		case k < 12:
			m.serverStep()
		case k < 14:
			m.takeReply(c)
		case k < 16:
			m.otherChange(c)
		case k < 17:
			m.read(c)
		case k < 19:
			m.deliver()
		case k < 20:
			m.now = m.now.Add(time.Duration(m.r.IntN(700)) * time.Millisecond)
			m.absorb(m.p.Tick(m.now), true)
			m.absorb(m.d.Tick(m.now), false)
		case k < 21:
			m.release(c)
		default:
			if withRestart && len(m.batches) == 0 && m.r.IntN(4) == 0 {
				m.restart()
			}
		}
		m.runReady()
		m.checkBeliefs()
	}
	// Drain: batches applied, replies taken in, callbacks delivered or past
	// their deadlines, recalls answered.
	for i := 0; i < 5000 && m.err == nil && m.busy(); i++ {
		switch {
		case len(m.batches) > 0:
			m.serverStep()
		case len(m.calls) > 0:
			m.deliver()
		default:
			progressed := false
			for _, c := range m.clients[1:] {
				if c.inflight != nil && c.inflight.replied || c.takeIn != nil {
					m.takeReply(c)
					progressed = true
				}
			}
			if !progressed {
				m.now = m.now.Add(500 * time.Millisecond)
				m.absorb(m.p.Tick(m.now), true)
				m.absorb(m.d.Tick(m.now), false)
			}
		}
		m.runReady()
		m.checkBeliefs()
	}
	if m.err == nil && len(m.parked) != 0 {
		var reqs []int
		for r := range m.parked {
			reqs = append(reqs, int(r))
		}
		sort.Ints(reqs)
		m.failf("changes still parked with nothing out: %v", reqs)
	}
	return m.newRevoked, m.err
}

func (m *mkModel) busy() bool {
	if len(m.calls) > 0 || len(m.batches) > 0 || len(m.parked) > 0 {
		return true
	}
	for _, c := range m.clients[1:] {
		if c.inflight != nil || c.takeIn != nil || len(c.recalls) > 0 {
			return true
		}
	}
	return false
}

// checkBeliefs: a client believes it holds a permit only while the table
// holds it, or after the table revoked it (the client learns of that at
// its next reintegration: its records are refused).
func (m *mkModel) checkBeliefs() {
	for _, c := range m.clients[1:] {
		for obj, p := range c.held {
			if p.pending || m.p.Holds(c.id, m.fid(obj), p.id) || m.revoked[[2]uint64{uint64(c.id), obj}] {
				continue
			}
			m.failf("c%d believes it holds the permit %x on o%d, which ended with no revocation", c.id, p.id, obj)
		}
	}
}

// see checks what someone other than a holder finds in dir when it changes
// it (change) or reads it: every name a holder's application was told of
// (change: by any holder; read: by holders whose permit there ended).
func (m *mkModel) see(dir uint64, who string, change bool) {
	for n, v := range m.due[dir] {
		if m.has(dir, n) != v {
			m.failf("%s finds o%d n%d exists=%v; a holder's ended permit told its application %v", who, dir, n, m.has(dir, n), v)
		}
	}
	if !change {
		return
	}
	if m.noPerm[dir] != 0 {
		return
	}
	for _, c := range m.clients[1:] {
		// What it was told of dir, and of a directory it made that is dir
		// (its reply not taken in yet).
		for k, t := range c.told {
			if k.obj != dir && (k.prov == 0 || m.made[[2]uint64{uint64(c.id), k.prov}] != dir) || c.conflict[k] ||
				c.conflict[mkRef{obj: dir}] || m.revoked[[2]uint64{uint64(c.id), dir}] {
				continue
			}
			for n, v := range t {
				if m.has(dir, n) != v {
					m.failf("%s made with o%d n%d exists=%v; c%d's application was told %v (as %v)", who, dir, n, m.has(dir, n), c.id, v, k)
				}
			}
		}
	}
}

func (m *mkModel) has(dir uint64, n int) bool { return m.names[dir][n] != 0 }

// superseded: dir/n was changed (by its holder by: nil, someone else);
// what others were told of it is no longer what anyone must find.
func (m *mkModel) superseded(dir uint64, n int, by *mkClient) {
	delete(m.due[dir], n)
	for _, c := range m.clients[1:] {
		if c == by {
			continue
		}
		delete(c.told[mkRef{obj: dir}], n)
		for k, t := range c.told {
			if k.prov != 0 && m.made[[2]uint64{uint64(c.id), k.prov}] == dir {
				delete(t, n)
			}
		}
	}
}

// endPermit: c's permit on obj ended cleanly (answered or released) with
// nothing of obj left in its log: what its application was told is due.
func (m *mkModel) endPermit(c *mkClient, obj uint64) {
	delete(c.held, obj)
	k := mkRef{obj: obj}
	if c.conflict[k] || m.noPerm[obj] != 0 || m.hasLog(c, k) {
		return
	}
	if m.due[obj] == nil {
		m.due[obj] = map[int]bool{}
	}
	for n, v := range c.told[k] {
		m.due[obj][n] = v
	}
}

func (m *mkModel) hasLog(c *mkClient, k mkRef) bool {
	for _, r := range c.log {
		if r.dir == k {
			return true
		}
	}
	return false
}

// view is c's view of a directory: the server's with its log applied (a
// provisional directory: its log's records only).
func (m *mkModel) view(c *mkClient, k mkRef) map[int]uint64 {
	v := map[int]uint64{}
	if k.prov == 0 {
		for n, o := range m.names[k.obj] {
			v[n] = o
		}
	}
	for _, r := range c.log {
		if r.dir != k {
			continue
		}
		switch r.op {
		case 'm':
			v[r.n] = 1<<62 | r.lsn // a provisional directory
		case 'c':
			v[r.n] = 1 << 61
		case 'd', 'u':
			v[r.n] = 0
		}
	}
	return v
}

// usable reports whether c may log a change of the directory obj now: it
// holds its permit, granted and not being recalled.
func (c *mkClient) usable(obj uint64) bool {
	p := c.held[obj]
	return p != nil && !p.pending && c.recalls[obj] == nil
}
