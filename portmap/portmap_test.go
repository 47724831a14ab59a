package portmap

import (
	"context"
	"net"
	"testing"

	"snfs/sunrpc"
)

func TestServer(t *testing.T) {
	pm := &Server{}
	pm.Add(Mapping{Prog: 100003, Vers: 3, Prot: ProtoTCP, Port: 2049})
	pm.Add(Mapping{Prog: 100005, Vers: 3, Prot: ProtoTCP, Port: 20048})
	pm.Add(Mapping{Prog: 100003, Vers: 3, Prot: ProtoTCP, Port: 2050}) // replaces
	s := &sunrpc.Server{}
	s.Register(pm.Program())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeTCP(ln)
	defer s.Shutdown(context.Background())
	ctx := context.Background()
	c, err := sunrpc.Dial(ctx, "tcp", ln.Addr().String(), Program, Version)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p, err := GetPort(ctx, c, 100003, 3, ProtoTCP); err != nil || p != 2050 {
		t.Fatalf("GETPORT nfs = %d, %v", p, err)
	}
	if p, err := GetPort(ctx, c, 100003, 3, ProtoUDP); err != nil || p != 0 {
		t.Fatalf("GETPORT unregistered = %d, %v", p, err)
	}
	if ok, err := Set(ctx, c, Mapping{Prog: 1, Vers: 1, Prot: ProtoTCP, Port: 1}); err != nil || ok {
		t.Fatalf("SET from a client = %v, %v (want refused)", ok, err)
	}
	var dump dumpRes
	if err := c.Call(ctx, ProcDump, nil, &dump); err != nil || len(dump) != 2 {
		t.Fatalf("DUMP = %+v, %v", dump, err)
	}
}
