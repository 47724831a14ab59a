package tests

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"snfs/mount3"
	"snfs/nfs3"
	"snfs/server"
	"snfs/sunrpc"
	"snfs/xdr"
)

// mntFromPort sends MNT for path from local source port port (0: any) over a
// fresh TCP connection and returns the mountstat3 of the reply.
func mntFromPort(t *testing.T, addr string, port int, path string) (mount3.Status, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	w := xdr.NewWriter(nil)
	w.Uint32(0)
	sunrpc.EncodeCall(w, &sunrpc.CallHeader{XID: 7, Prog: mount3.Program, Vers: mount3.Version, Proc: mount3.ProcMnt,
		Cred: sunrpc.EncodeAuthSys(sunrpc.AuthSysParams{MachineName: "t"}), Verf: sunrpc.OpaqueAuth{}})
	(&mount3.DirPath{Path: path}).Encode(w)
	msg := w.Bytes()
	binary.BigEndian.PutUint32(msg, uint32(len(msg)-4)|1<<31)
	if _, err := nc.Write(msg); err != nil {
		return 0, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return 0, err
	}
	rec := make([]byte, binary.BigEndian.Uint32(hdr[:])&^(1<<31))
	if _, err := io.ReadFull(nc, rec); err != nil {
		return 0, err
	}
	// xid, REPLY, MSG_ACCEPTED, verifier (flavor, empty body), SUCCESS, mountstat3.
	if len(rec) < 28 || binary.BigEndian.Uint32(rec[20:]) != 0 {
		return 0, errors.New("reply not accepted")
	}
	return mount3.Status(binary.BigEndian.Uint32(rec[24:])), nil
}

// TestSecureExport: an export with "secure" refuses MNT from an unprivileged
// source port (MNT3ERR_ACCES, as mountd) and NFS calls from one (NFS3ERR_PERM, as
// knfsd), and serves a privileged port; an export without it (the default,
// "insecure") serves any port.
func TestSecureExport(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	sec := diskTempDir(t, "snfs-secure-")
	insec := diskTempDir(t, "snfs-insecure-")
	secure, _ := server.ParseOptions(server.DefaultOptions, "rw,secure")
	plain, _ := server.ParseOptions(server.DefaultOptions, "rw")
	e := newEnvConfig(t, insec, []server.ExportConfig{
		{Path: insec, Clients: []server.ClientRule{{Spec: "*", Opts: plain}}}, // the harness mounts the first
		{Path: sec, Clients: []server.ClientRule{{Spec: "*", Opts: secure}}},
	})
	if st, err := mntFromPort(t, e.addr, 0, sec); err != nil || st != mount3.ErrAcces {
		t.Fatalf("MNT of a secure export from an unprivileged port: %v %v, want MNT3ERR_ACCES", st, err)
	}
	if st, err := mntFromPort(t, e.addr, 0, insec); err != nil || st != mount3.OK {
		t.Fatalf("MNT of an insecure export from an unprivileged port: %v %v", st, err)
	}
	// A privileged port: try a few in case one is taken (or in TIME_WAIT).
	var st mount3.Status
	var err error
	for port := 700 + int(time.Now().UnixNano()%200); port < 1024; port++ {
		st, err = mntFromPort(t, e.addr, port, sec)
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil || st != mount3.OK {
		t.Fatalf("MNT of a secure export from a privileged port: %v %v", st, err)
	}
	// e.nfs dials from an ephemeral (unprivileged) port.
	root := rootHandleOf(t, e, sec)
	ga, err := e.nfs.Getattr(ctx, root)
	want(t, "GETATTR on a secure export from port "+strconv.Itoa(e.port()), ga.Status, err, nfs3.ErrPerm)
	ga, err = e.nfs.Getattr(ctx, e.root)
	ok(t, "GETATTR on an insecure export", ga.Status, err)
}
