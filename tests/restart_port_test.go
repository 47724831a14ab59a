package tests

import (
	"os"
	"testing"

	"snfs/client"
	"snfs/nfs3"
)

// TestRestartPortHeldByChild: a restart of the in-process server succeeds,
// on its port, while another process holds copies of the old server's
// sockets, as a child of this test binary does from its fork until its
// execve has closed them (env.serveOn says when that lasts). The new server
// answers over TCP and UDP at once.
func TestRestartPortHeldByChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw")
	files := make([]*os.File, 0, 2)
	lf, err := e.ln.(interface{ File() (*os.File, error) }).File()
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, lf)
	pf, err := e.pc.(interface{ File() (*os.File, error) }).File()
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, pf)
	// The holder: a child given the sockets, living until its stdin closes.
	holder := command("cat")
	holder.ExtraFiles = files
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		holder.Wait()
	}()
	for _, f := range files {
		f.Close() // the child's copies are the only ones besides the server's
	}

	e.restart()
	if err := e.nfs.Null(ctx); err != nil {
		t.Fatalf("NULL over TCP after the restart: %v", err)
	}
	u, err := client.DialNFS(ctx, "udp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	res, err := u.Getattr(ctx, e.root)
	ok(t, "GETATTR over UDP after the restart", res.Status, err)
	if res.Attr.Type != nfs3.TypeDir {
		t.Fatalf("GETATTR of the root: type %v", res.Attr.Type)
	}
}
