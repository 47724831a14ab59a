package nfs3

import "snfs/xdr"

// ReadArgs is READ3args (RFC 1813 section 3.3.6, READ: read from file).
type ReadArgs struct {
	File   FH
	Offset uint64
	Count  uint32
}

// Encode implements xdr.Encoder.
func (x *ReadArgs) Encode(w *xdr.Writer) { w.Opaque(x.File); w.Uint64(x.Offset); w.Uint32(x.Count) }

// Decode implements xdr.Decoder.
func (x *ReadArgs) Decode(r *xdr.Reader) error {
	x.File = DecodeFH(r)
	x.Offset = r.Uint64()
	x.Count = r.Uint32()
	return r.Err()
}

// ReadRes is READ3res. On the client, Data aliases the reply buffer.
type ReadRes struct {
	Status Status
	Attr   *Fattr
	Count  uint32 // when OK
	EOF    bool   // when OK
	Data   []byte // when OK
}

// SetStatus implements Result.
func (x *ReadRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *ReadRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	EncodePostOpAttr(w, x.Attr)
	if x.Status == OK {
		w.Uint32(x.Count)
		w.Bool(x.EOF)
		w.Opaque(x.Data)
	}
}

// EncodeReadOK writes a successful READ3res whose data is read straight into the
// reply: fill gets a buffer of count bytes and returns how many it filled and
// whether that reached end of file.
func EncodeReadOK(w *xdr.Writer, attr *Fattr, count uint32, fill func([]byte) (int, bool, error)) error {
	w.Uint32(uint32(OK))
	EncodePostOpAttr(w, attr)
	head := w.Len()
	w.Uint32(0) // count
	w.Uint32(0) // eof
	w.Uint32(0) // data length
	n, eof, err := fill(w.Extend(int(count)))
	if err != nil {
		w.Truncate(head)
		return err
	}
	w.Truncate(head)
	w.Uint32(uint32(n))
	w.Bool(eof)
	w.Uint32(uint32(n))
	w.Extend(n)
	w.Pad(n)
	return nil
}

// Decode implements xdr.Decoder.
func (x *ReadRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Attr = DecodePostOpAttr(r)
	if x.Status == OK {
		x.Count = r.Uint32()
		x.EOF = r.Bool()
		x.Data = r.Opaque(MaxData * 4)
	}
	return r.Err()
}
