package snfs1

import (
	"fmt"

	"snfs/nfs3"
	"snfs/xdr"
)

// ReintegrateMax is SNFS_REINTEGRATE_MAX: the most log records one
// REINTEGRATE carries (docs/protocol.md, "REINTEGRATE"). Every record holds
// at most two names (nfs3.MaxName bytes each) and a symbolic link's target
// (nfs3.MaxPath bytes), so a batch is bounded by count and by the RPC record.
const ReintegrateMax = 1024

// StoreMax is SNFS_STORE_MAX: the most bytes of file data one CML_STORE
// record carries. A file larger than this is not worth carrying in the
// log's batch: its data goes by WRITE as before, where the round trips of
// its WRITEs overlap, and a bigger record would hold up the records after
// it for the time its data takes to cross the link.
const StoreMax = 64 << 10

// ReintegrateStoreMax is SNFS_REINTEGRATE_STORE_MAX: the most bytes of
// CML_STORE data in one REINTEGRATE, all records together. With every
// record's names and targets (at most about 5 MiB for ReintegrateMax
// records) a call stays below the RPC layer's record limit (8 MiB), and
// the server holds at most this much file data per batch being applied
// (a batch waiting for callbacks keeps its records).
const ReintegrateStoreMax = 1 << 20

// CMLOp is cmlop1: what a log record does (Coda's client modification log).
// Data writes are not logged (they go by WRITE or APPEND as they do without
// a permit), except a small file's whole content as CML_STORE.
type CMLOp uint32

// cmlop1 values.
const (
	CMLCreate  CMLOp = 1 // GUARDED CREATE of a regular file
	CMLMkdir   CMLOp = 2
	CMLSymlink CMLOp = 3
	CMLLink    CMLOp = 4
	CMLUnlink  CMLOp = 5 // REMOVE
	CMLRmdir   CMLOp = 6
	CMLRename  CMLOp = 7
	CMLSetattr CMLOp = 8 // SETATTR without a guard
	// CMLCreateOpen is CML_CREATE_OPEN on the wire: a CML_CREATE whose
	// file the server also opens for writing for the caller (the open
	// counted as one OPEN_WRITE, its result in ReintegrateRes.Opens). A
	// decoded record carries it as Op CMLCreate with Open set, so that
	// everything that treats a CREATE treats this one alike.
	CMLCreateOpen CMLOp = 9
	// CMLStore is CML_STORE: the whole content of a regular file (at most
	// StoreMax bytes) written from offset 0, the file cut to its length,
	// and its access and modification times set: the data of a file made
	// under the permit, carried in the batch instead of WRITEs after it.
	CMLStore CMLOp = 10
	maxCMLOp CMLOp = CMLStore
)

func (o CMLOp) String() string {
	names := [...]string{"", "CREATE", "MKDIR", "SYMLINK", "LINK", "UNLINK", "RMDIR", "RENAME", "SETATTR", "CREATE_OPEN", "STORE"}
	if o >= 1 && o <= maxCMLOp {
		return names[o]
	}
	return fmt.Sprintf("CMLOp(%d)", uint32(o))
}

// ObjRef is objref1: an object named by its file handle, or by the
// provisional id a record earlier in the same batch gave it (Prov, never 0
// on the wire: 0 is "a handle").
type ObjRef struct {
	Prov uint64  // non-zero: provisional
	FH   nfs3.FH // when Prov is 0
}

func (o *ObjRef) encode(w *xdr.Writer) {
	w.Bool(o.Prov != 0)
	if o.Prov != 0 {
		w.Uint64(o.Prov)
		return
	}
	w.Opaque(o.FH)
}

func (o *ObjRef) decode(r *xdr.Reader) {
	*o = ObjRef{}
	if r.Bool() {
		if o.Prov = r.Uint64(); o.Prov == 0 && r.Err() == nil {
			r.SetErr(fmt.Errorf("snfs1: provisional id 0"))
		}
		return
	}
	o.FH = nfs3.DecodeFH(r)
}

// CMLRecord is cmlrec1: one log record. Which fields it carries depends on
// Op (the union's arms):
//
//	CREATE, MKDIR  Dir, Name, Attr, New (CREATE: Open)
//	SYMLINK        Dir, Name, Attr, Target, New
//	LINK           Obj (the file), Dir, Name (the new name)
//	UNLINK, RMDIR  Dir, Name
//	RENAME         Dir, Name, ToDir, ToName
//	SETATTR        Obj, Attr
//	STORE          Obj, Data, Atime, Mtime
type CMLRecord struct {
	LSN    uint64
	Op     CMLOp
	Dir    ObjRef
	Name   string
	Attr   nfs3.Sattr
	Target string
	New    uint64 // the provisional id later records may name the new object by (0: none)
	Obj    ObjRef
	ToDir  ObjRef
	ToName string
	// Open: a CREATE sent as CML_CREATE_OPEN (the caller holds the file
	// open and asks the server to open it for writing). A client sets it
	// only on what it sends, never in its log: a log resent by a later
	// mount has no open to give it to.
	Open bool
	// Data, Atime, Mtime: a STORE's content (at most StoreMax bytes) and
	// the times the file gets after it.
	Data         []byte
	Atime, Mtime nfs3.Time
}

func (c *CMLRecord) encode(w *xdr.Writer) {
	w.Uint64(c.LSN)
	if c.Op == CMLCreate && c.Open {
		w.Uint32(uint32(CMLCreateOpen))
	} else {
		w.Uint32(uint32(c.Op))
	}
	switch c.Op {
	case CMLCreate, CMLMkdir, CMLSymlink:
		c.Dir.encode(w)
		w.String(c.Name)
		c.Attr.Encode(w)
		if c.Op == CMLSymlink {
			w.String(c.Target)
		}
		w.Uint64(c.New)
	case CMLLink:
		c.Obj.encode(w)
		c.Dir.encode(w)
		w.String(c.Name)
	case CMLUnlink, CMLRmdir:
		c.Dir.encode(w)
		w.String(c.Name)
	case CMLRename:
		c.Dir.encode(w)
		w.String(c.Name)
		c.ToDir.encode(w)
		w.String(c.ToName)
	case CMLSetattr:
		c.Obj.encode(w)
		c.Attr.Encode(w)
	case CMLStore:
		c.Obj.encode(w)
		w.Opaque(c.Data)
		w.Uint32(c.Atime.Sec)
		w.Uint32(c.Atime.Nsec)
		w.Uint32(c.Mtime.Sec)
		w.Uint32(c.Mtime.Nsec)
	}
}

func (c *CMLRecord) decode(r *xdr.Reader) {
	*c = CMLRecord{LSN: r.Uint64()}
	op := r.Uint32()
	if r.Err() == nil && (op < 1 || op > uint32(maxCMLOp)) {
		r.SetErr(fmt.Errorf("snfs1: %w: log record op %d", xdr.ErrBadEnum, op))
		return
	}
	c.Op = CMLOp(op)
	if c.Op == CMLCreateOpen {
		c.Op, c.Open = CMLCreate, true
	}
	switch c.Op {
	case CMLCreate, CMLMkdir, CMLSymlink:
		c.Dir.decode(r)
		c.Name = r.String(nfs3.MaxName)
		c.Attr.Decode(r)
		if c.Op == CMLSymlink {
			c.Target = r.String(nfs3.MaxPath)
		}
		c.New = r.Uint64()
	case CMLLink:
		c.Obj.decode(r)
		c.Dir.decode(r)
		c.Name = r.String(nfs3.MaxName)
	case CMLUnlink, CMLRmdir:
		c.Dir.decode(r)
		c.Name = r.String(nfs3.MaxName)
	case CMLRename:
		c.Dir.decode(r)
		c.Name = r.String(nfs3.MaxName)
		c.ToDir.decode(r)
		c.ToName = r.String(nfs3.MaxName)
	case CMLSetattr:
		c.Obj.decode(r)
		c.Attr.Decode(r)
	case CMLStore:
		c.Obj.decode(r)
		if d := r.Opaque(StoreMax); r.Err() == nil && len(d) > 0 {
			c.Data = append([]byte{}, d...)
		}
		c.Atime = nfs3.Time{Sec: r.Uint32(), Nsec: r.Uint32()}
		c.Mtime = nfs3.Time{Sec: r.Uint32(), Nsec: r.Uint32()}
	}
}

// ReintegrateArgs is REINTEGRATE1args (docs/protocol.md, "REINTEGRATE"): the
// permits the batch is applied under and the log records, in LSN order.
type ReintegrateArgs struct {
	Client  ClientID
	Permits []PermitRef
	Records []CMLRecord
}

// Encode implements xdr.Encoder.
func (a *ReintegrateArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	encodePermitRefs(w, a.Permits)
	w.Uint32(uint32(len(a.Records)))
	for i := range a.Records {
		a.Records[i].encode(w)
	}
}

// Decode implements xdr.Decoder. Handles alias the reader's buffer; names
// and STORE data are copies. It refuses more than ReintegrateMax records,
// records out of LSN order (each LSN above the one before), and more than
// ReintegrateStoreMax bytes of STORE data in all.
func (a *ReintegrateArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.Permits = decodePermitRefs(r)
	a.Records = nil
	n := r.Uint32()
	if r.Err() == nil && n > ReintegrateMax {
		r.SetErr(xdr.ErrTooLong)
	}
	if r.Err() != nil || n == 0 {
		return r.Err()
	}
	a.Records = make([]CMLRecord, 0, min(n, 64))
	var given map[uint64]bool // provisional ids given by the records so far
	stored := 0               // STORE data bytes so far
	for i := range n {
		var c CMLRecord
		c.decode(r)
		if r.Err() != nil {
			a.Records = nil
			return r.Err()
		}
		if stored += len(c.Data); stored > ReintegrateStoreMax {
			r.SetErr(fmt.Errorf("snfs1: %w: more than %d bytes of STORE data", xdr.ErrTooLong, ReintegrateStoreMax))
			a.Records = nil
			return r.Err()
		}
		if i > 0 && c.LSN <= a.Records[i-1].LSN {
			r.SetErr(fmt.Errorf("snfs1: log record %d out of order (LSN %d after %d)", i, c.LSN, a.Records[i-1].LSN))
			a.Records = nil
			return r.Err()
		}
		if c.New != 0 {
			// A provisional id names one object of the batch: given twice,
			// a later reference to it would be ambiguous.
			if given == nil {
				given = map[uint64]bool{}
			}
			if given[c.New] {
				r.SetErr(fmt.Errorf("snfs1: log record %d gives provisional id %d again", i, c.New))
				a.Records = nil
				return r.Err()
			}
			given[c.New] = true
		}
		a.Records = append(a.Records, c)
	}
	return r.Err()
}

// CMLResult is cmlres1: the outcome of one record. For a record that made
// an object (CREATE, MKDIR, SYMLINK), Obj is its handle and Attr its
// attributes; for LINK and SETATTR, Attr is the object's. For an MKDIR,
// Permit is the id of the permit its client now holds on the new directory
// (0: none).
type CMLResult struct {
	LSN    uint64
	Status Status
	Obj    nfs3.FH     // post_op_fh3
	Attr   *nfs3.Fattr // post_op_attr
	Permit uint64
}

func (c *CMLResult) encode(w *xdr.Writer) {
	w.Uint64(c.LSN)
	w.Uint32(uint32(c.Status))
	nfs3.EncodePostOpFH(w, c.Obj)
	nfs3.EncodePostOpAttr(w, c.Attr)
	w.Uint64(c.Permit)
}

func (c *CMLResult) decode(r *xdr.Reader) {
	c.LSN = r.Uint64()
	c.Status = decodeStatus(r)
	c.Obj = nfs3.DecodePostOpFH(r)
	c.Attr = nfs3.DecodePostOpAttr(r)
	c.Permit = r.Uint64()
}

// ReintegrateRes is REINTEGRATE1res: a failure of the whole call is its
// status alone (nothing was applied); on success, Applied is the client's
// last applied LSN (durable) and Results has one entry per record of the
// batch, in order, up to and including the first that failed (its Status
// says why; the records after it were not applied).
type ReintegrateRes struct {
	Status  Status
	Applied uint64
	Results []CMLResult
	// Dirs: the attributes, after the batch, of the directories whose
	// entries the records it applied changed (at most 2 a record), so that
	// the client keeps its listings and their attributes without a call.
	Dirs []DirAttr
	// Opens: one per CML_CREATE_OPEN record answered OK, in record order:
	// the open of the file it made (or made before: a resend).
	Opens []CMLOpen
}

// CMLOpen is cmlopen1: the OPEN_WRITE a CML_CREATE_OPEN record asked for,
// with its own status (not OK: not granted, not counted, never CLOSEd: the
// client OPENs the file itself), and the boot verifier of the server that
// answered (a reply saved before a restart and replayed after it reports an
// open the new server does not count).
type CMLOpen struct {
	LSN        uint64
	ServerVerf Verifier
	Open       OpenRes
}

// DirAttr is dirattr1: a directory's handle and attributes.
type DirAttr struct {
	Dir  nfs3.FH
	Attr nfs3.Fattr
}

// ReintegrateDirsMax bounds ReintegrateRes.Dirs: two a record.
const ReintegrateDirsMax = 2 * ReintegrateMax

// SetStatus sets the status of a failure result.
func (x *ReintegrateRes) SetStatus(s Status) { x.Status = s }

// Failed returns the first record that failed, or nil.
func (x *ReintegrateRes) Failed() *CMLResult {
	for i := range x.Results {
		if x.Results[i].Status != nfs3.OK {
			return &x.Results[i]
		}
	}
	return nil
}

// Encode implements xdr.Encoder.
func (x *ReintegrateRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status != 0 {
		return
	}
	w.Uint64(x.Applied)
	w.Uint32(uint32(len(x.Results)))
	for i := range x.Results {
		x.Results[i].encode(w)
	}
	w.Uint32(uint32(len(x.Dirs)))
	for i := range x.Dirs {
		x.Dirs[i].Dir.Encode(w)
		x.Dirs[i].Attr.Encode(w)
	}
	w.Uint32(uint32(len(x.Opens)))
	for i := range x.Opens {
		o := &x.Opens[i]
		w.Uint64(o.LSN)
		w.FixedOpaque(o.ServerVerf[:])
		o.Open.Encode(w)
	}
}

// Decode implements xdr.Decoder. Nothing aliases the reader's buffer.
func (x *ReintegrateRes) Decode(r *xdr.Reader) error {
	*x = ReintegrateRes{Status: decodeStatus(r)}
	if x.Status != 0 || r.Err() != nil {
		return r.Err()
	}
	x.Applied = r.Uint64()
	n := r.Uint32()
	if r.Err() == nil && n > ReintegrateMax {
		r.SetErr(xdr.ErrTooLong)
	}
	if r.Err() != nil {
		return r.Err()
	}
	if n > 0 {
		x.Results = make([]CMLResult, 0, min(n, 64))
	}
	for range n {
		var c CMLResult
		c.decode(r)
		if r.Err() != nil {
			x.Results = nil
			return r.Err()
		}
		x.Results = append(x.Results, c)
	}
	n = r.Uint32()
	if r.Err() == nil && n > ReintegrateDirsMax {
		r.SetErr(xdr.ErrTooLong)
	}
	if r.Err() != nil {
		x.Results = nil
		return r.Err()
	}
	if n > 0 {
		x.Dirs = make([]DirAttr, 0, min(n, 64))
	}
	for range n {
		var d DirAttr
		d.Dir = append(nfs3.FH(nil), nfs3.DecodeFH(r)...)
		d.Attr.Decode(r)
		if r.Err() != nil {
			x.Results, x.Dirs = nil, nil
			return r.Err()
		}
		x.Dirs = append(x.Dirs, d)
	}
	n = r.Uint32()
	if r.Err() == nil && n > ReintegrateMax {
		r.SetErr(xdr.ErrTooLong)
	}
	if r.Err() != nil {
		x.Results, x.Dirs = nil, nil
		return r.Err()
	}
	for range n {
		var o CMLOpen
		o.LSN = r.Uint64()
		o.ServerVerf.decode(r)
		if o.Open.Decode(r) != nil {
			x.Results, x.Dirs, x.Opens = nil, nil, nil
			return r.Err()
		}
		x.Opens = append(x.Opens, o)
	}
	return r.Err()
}
