package sunrpc

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"testing"

	"snfs/xdr"
)

// FuzzDecodeCall: the call header decoder never panics and never over-reads.
func FuzzDecodeCall(f *testing.F) {
	var w xdr.Writer
	EncodeCall(&w, &CallHeader{XID: 1, Prog: 100003, Vers: 3, Proc: 1,
		Cred: EncodeAuthSys(AuthSysParams{MachineName: "h", UID: 1, GID: 2, GIDs: []uint32{3}})})
	f.Add(w.Bytes())
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeCall(xdr.NewReader(b))
		if err == nil && h.Cred.Flavor == AuthSys {
			DecodeAuthSys(h.Cred.Body)
		}
	})
}

// FuzzDispatch: any message handed to the server yields a well-formed reply or
// none, never a panic; the inline check never panics either, and when the call
// decodes, the arguments it was shown are the ones the handler gets.
func FuzzDispatch(f *testing.F) {
	s := &Server{}
	var inlineArgs, handlerArgs []byte
	s.Register(&Program{Name: "t", Number: testProg, Versions: map[uint32][]Proc{3: {
		{Name: "NULL", Handler: func(context.Context, *Call, *xdr.Reader, *xdr.Writer) error { return nil }},
		{Name: "ECHO", Cache: true, Inline: func(args []byte) bool {
			inlineArgs = append([]byte{}, args...)
			return true
		}, Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			handlerArgs = append([]byte{}, a.Rest()...)
			w.Opaque(a.Opaque(1024))
			if a.Err() != nil {
				return ErrGarbageArgs
			}
			return nil
		}}}}})
	s.DRC = NewDRC(64, 1<<16)
	s.init()
	var w xdr.Writer
	EncodeCall(&w, &CallHeader{XID: 1, Prog: testProg, Vers: 3, Proc: 1})
	w.Opaque([]byte("hi"))
	f.Add(w.Bytes())
	w = xdr.Writer{}
	EncodeCall(&w, &CallHeader{XID: 2, Prog: testProg, Vers: 3, Proc: 1,
		Cred: EncodeAuthSys(AuthSysParams{MachineName: "host", UID: 1, GID: 2, GIDs: []uint32{3, 4}})})
	w.Opaque([]byte("with a credential"))
	f.Add(w.Bytes())
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	f.Fuzz(func(t *testing.T, b []byte) {
		inlineArgs, handlerArgs = nil, nil
		s.inline(b)
		reply := s.dispatch(b, "tcp", addr, nil)
		if reply != nil && len(reply) < 4+12 {
			t.Fatalf("short reply %x", reply)
		}
		if handlerArgs != nil && !bytes.Equal(inlineArgs, handlerArgs) {
			t.Fatalf("inline saw args %x, handler %x", inlineArgs, handlerArgs)
		}
	})
}

// FuzzReadRecord: record marking never reads past its limit.
func FuzzReadRecord(f *testing.F) {
	f.Add([]byte{0x80, 0, 0, 4, 1, 2, 3, 4})
	f.Add([]byte{0, 0, 0, 2, 1, 2, 0x80, 0, 0, 1, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := readRecord(bufio.NewReader(bytes.NewReader(b)), nil, 4096)
		if err == nil && len(rec) > 4096 {
			t.Fatal("record over limit")
		}
	})
}

// FuzzDecodeReply: a reply from the peer (a server's answer, or a client's answer
// to a call back) never makes its decoder panic or over-read.
func FuzzDecodeReply(f *testing.F) {
	var w xdr.Writer
	encodeAccepted(&w, 7, Success)
	w.Uint32(42)
	f.Add(w.Bytes())
	w = xdr.Writer{}
	encodeProgMismatch(&w, 8, 1, 3)
	f.Add(w.Bytes())
	w = xdr.Writer{}
	encodeAuthError(&w, 9, AuthTooWeak)
	f.Add(w.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		var res u32res
		decodeResults(b, 1, &res)
	})
}
