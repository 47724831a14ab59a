package nfs3

import "snfs/xdr"

// StableHow is stable_how.
type StableHow uint32

// stable_how values.
const (
	Unstable StableHow = 0
	DataSync StableHow = 1
	FileSync StableHow = 2
)

func (s StableHow) String() string {
	switch s {
	case Unstable:
		return "UNSTABLE"
	case DataSync:
		return "DATA_SYNC"
	case FileSync:
		return "FILE_SYNC"
	}
	return "stable_how(?)"
}

// WriteArgs is WRITE3args (RFC 1813 section 3.3.7, WRITE: write to file).
// When decoded, Data aliases the request buffer.
type WriteArgs struct {
	File   FH
	Offset uint64
	Count  uint32
	Stable StableHow
	Data   []byte
}

// Encode implements xdr.Encoder.
func (x *WriteArgs) Encode(w *xdr.Writer) {
	w.Opaque(x.File)
	w.Uint64(x.Offset)
	w.Uint32(x.Count)
	w.Uint32(uint32(x.Stable))
	w.Opaque(x.Data)
}

// Decode implements xdr.Decoder.
func (x *WriteArgs) Decode(r *xdr.Reader) error {
	x.decodeHead(r)
	x.Data = r.Opaque(r.Remaining())
	return r.Err()
}

// decodeHead decodes the fields of WRITE3args before the data.
func (x *WriteArgs) decodeHead(r *xdr.Reader) {
	x.File = DecodeFH(r)
	x.Offset = r.Uint64()
	x.Count = r.Uint32()
	x.Stable = StableHow(r.Enum(3))
}

// PeekWrite reads the file, offset, count and stable_how of encoded WRITE3args
// without the data (Data is nil; File aliases b): a cheap look at a call not yet
// decoded, such as the server's choice of where to run a WRITE. ok is false when
// those fields do not decode. It shares Decode's code for them, so whenever Decode
// accepts b, PeekWrite accepts it too and agrees (FuzzPeekWrite); it may accept a
// call whose data Decode then rejects.
func PeekWrite(b []byte) (head WriteArgs, ok bool) {
	var r xdr.Reader
	r.Reset(b)
	head.decodeHead(&r)
	return head, r.Err() == nil
}

// WriteRes is WRITE3res.
type WriteRes struct {
	Status    Status
	Wcc       WccData
	Count     uint32              // when OK
	Committed StableHow           // when OK
	Verf      [WriteVerfSize]byte // when OK
}

// SetStatus implements Result.
func (x *WriteRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *WriteRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	x.Wcc.Encode(w)
	if x.Status == OK {
		w.Uint32(x.Count)
		w.Uint32(uint32(x.Committed))
		w.FixedOpaque(x.Verf[:])
	}
}

// Decode implements xdr.Decoder.
func (x *WriteRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Wcc.Decode(r)
	if x.Status == OK {
		x.Count = r.Uint32()
		x.Committed = StableHow(r.Enum(3))
		copy(x.Verf[:], r.FixedOpaque(WriteVerfSize))
	}
	return r.Err()
}
