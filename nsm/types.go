package nsm

import (
	"fmt"

	"snfs/xdr"
)

// Program, version, procedures and bounds (XNFS chapter 11; sm_inter.x).
const (
	Program = 100024
	Version = 1

	ProcNull      = 0
	ProcStat      = 1
	ProcMon       = 2
	ProcUnmon     = 3
	ProcUnmonAll  = 4
	ProcSimuCrash = 5
	ProcNotify    = 6
	NumProcs      = 7

	// MaxStrLen is SM_MAXSTRLEN: the longest host name.
	MaxStrLen = 1024
	// PrivSize is the size of the private data a lock manager gives SM_MON and
	// gets back in its callback (SM_PRIV_SIZE).
	PrivSize = 16
)

// ProcNames are the procedure names as in the XDR, indexed by number.
var ProcNames = [NumProcs]string{"SM_NULL", "SM_STAT", "SM_MON", "SM_UNMON", "SM_UNMON_ALL",
	"SM_SIMU_CRASH", "SM_NOTIFY"}

// Res is res: whether the monitor agrees to monitor (or knows) a host.
type Res uint32

// res values.
const (
	StatSucc Res = 0 // STAT_SUCC
	StatFail Res = 1 // STAT_FAIL
)

func (r Res) String() string {
	switch r {
	case StatSucc:
		return "STAT_SUCC"
	case StatFail:
		return "STAT_FAIL"
	}
	return fmt.Sprintf("res(%d)", uint32(r))
}

// Name is sm_name: the argument of SM_STAT.
type Name struct {
	MonName string // at most MaxStrLen bytes
}

// Encode implements xdr.Encoder.
func (n *Name) Encode(w *xdr.Writer) { w.String(n.MonName) }

// Decode implements xdr.Decoder.
func (n *Name) Decode(r *xdr.Reader) error {
	n.MonName = r.String(MaxStrLen)
	return r.Err()
}

// MyID is my_id: the RPC procedure (on host MyName, the monitor's own host in
// practice) that the monitor calls with a Status when a monitored host
// restarts. Linux's lockd asks for program 100021, version 3, procedure 16
// (its private NLMPROC_NSM_NOTIFY).
type MyID struct {
	MyName string // at most MaxStrLen bytes
	MyProg int32
	MyVers int32
	MyProc int32
}

// Encode implements xdr.Encoder.
func (m *MyID) Encode(w *xdr.Writer) {
	w.String(m.MyName)
	w.Int32(m.MyProg)
	w.Int32(m.MyVers)
	w.Int32(m.MyProc)
}

// Decode implements xdr.Decoder.
func (m *MyID) Decode(r *xdr.Reader) error {
	m.MyName = r.String(MaxStrLen)
	m.MyProg = r.Int32()
	m.MyVers = r.Int32()
	m.MyProc = r.Int32()
	return r.Err()
}

// MonID is mon_id: the host to monitor (MonName) and whom to tell (MyID).
type MonID struct {
	MonName string // at most MaxStrLen bytes
	MyID    MyID
}

// Encode implements xdr.Encoder.
func (m *MonID) Encode(w *xdr.Writer) {
	w.String(m.MonName)
	m.MyID.Encode(w)
}

// Decode implements xdr.Decoder.
func (m *MonID) Decode(r *xdr.Reader) error {
	m.MonName = r.String(MaxStrLen)
	return m.MyID.Decode(r)
}

// StatRes is sm_stat_res: the result of SM_STAT and SM_MON, with the
// monitor's own state number.
type StatRes struct {
	ResStat Res
	State   int32
}

// Encode implements xdr.Encoder.
func (x *StatRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.ResStat))
	w.Int32(x.State)
}

// Decode implements xdr.Decoder.
func (x *StatRes) Decode(r *xdr.Reader) error {
	x.ResStat = Res(r.Enum(2))
	x.State = r.Int32()
	return r.Err()
}

// Stat is sm_stat: the result of SM_UNMON and SM_UNMON_ALL, the monitor's own
// state number.
type Stat struct {
	State int32
}

// Encode implements xdr.Encoder.
func (x *Stat) Encode(w *xdr.Writer) { w.Int32(x.State) }

// Decode implements xdr.Decoder.
func (x *Stat) Decode(r *xdr.Reader) error {
	x.State = r.Int32()
	return r.Err()
}
