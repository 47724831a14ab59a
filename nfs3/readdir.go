package nfs3

import "snfs/xdr"

// ReaddirArgs is READDIR3args (RFC 1813 section 3.3.16, READDIR: read from directory).
type ReaddirArgs struct {
	Dir        FH
	Cookie     uint64
	CookieVerf [CookieVerfSize]byte
	Count      uint32
}

// Encode implements xdr.Encoder.
func (x *ReaddirArgs) Encode(w *xdr.Writer) {
	w.Opaque(x.Dir)
	w.Uint64(x.Cookie)
	w.FixedOpaque(x.CookieVerf[:])
	w.Uint32(x.Count)
}

// Decode implements xdr.Decoder.
func (x *ReaddirArgs) Decode(r *xdr.Reader) error {
	x.Dir = DecodeFH(r)
	x.Cookie = r.Uint64()
	copy(x.CookieVerf[:], r.FixedOpaque(CookieVerfSize))
	x.Count = r.Uint32()
	return r.Err()
}

// Entry is entry3, and entryplus3 when Attr/Handle are used (READDIRPLUS).
type Entry struct {
	FileID uint64
	Name   string
	Cookie uint64
	Attr   *Fattr // READDIRPLUS only
	Handle FH     // READDIRPLUS only
}

// ReaddirRes is READDIR3res, and READDIRPLUS3res when Plus is set.
type ReaddirRes struct {
	Plus       bool
	Status     Status
	DirAttr    *Fattr
	CookieVerf [CookieVerfSize]byte // when OK
	Entries    []Entry              // when OK
	EOF        bool                 // when OK
}

// SetStatus implements Result.
func (x *ReaddirRes) SetStatus(s Status) { x.Status = s }

// EntrySize is how many bytes e adds to an encoded reply.
func EntrySize(e *Entry, plus bool) int {
	n := 4 + 8 + 4 + (len(e.Name)+3)&^3 + 8
	if plus {
		n += 4 + 4
		if e.Attr != nil {
			n += 84
		}
		if e.Handle != nil {
			n += 4 + (len(e.Handle)+3)&^3
		}
	}
	return n
}

// Encode implements xdr.Encoder.
func (x *ReaddirRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	EncodePostOpAttr(w, x.DirAttr)
	if x.Status != OK {
		return
	}
	w.FixedOpaque(x.CookieVerf[:])
	for i := range x.Entries {
		e := &x.Entries[i]
		w.Bool(true)
		w.Uint64(e.FileID)
		w.String(e.Name)
		w.Uint64(e.Cookie)
		if x.Plus {
			EncodePostOpAttr(w, e.Attr)
			EncodePostOpFH(w, e.Handle)
		}
	}
	w.Bool(false)
	w.Bool(x.EOF)
}

// Decode implements xdr.Decoder. Set Plus before decoding a READDIRPLUS reply.
func (x *ReaddirRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.DirAttr = DecodePostOpAttr(r)
	x.Entries = x.Entries[:0]
	if x.Status != OK {
		return r.Err()
	}
	copy(x.CookieVerf[:], r.FixedOpaque(CookieVerfSize))
	for r.Bool() {
		if len(x.Entries) >= MaxEntries {
			r.SetErr(xdr.ErrTooLong)
			break
		}
		e := Entry{FileID: r.Uint64(), Name: r.String(MaxPath), Cookie: r.Uint64()}
		if x.Plus {
			e.Attr = DecodePostOpAttr(r)
			e.Handle = DecodePostOpFH(r)
		}
		if r.Err() != nil {
			break
		}
		x.Entries = append(x.Entries, e)
	}
	x.EOF = r.Bool()
	return r.Err()
}
