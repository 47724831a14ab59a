package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"snfs/sunrpc"
	"snfs/xdr"
)

// The addresses of clients' lock managers and status monitors, as their
// rpcbind gave them, kept so that a GRANTED or _RES call after the first one
// to a host costs one connection and one call, not two of each (the rpcbind
// query before the call). A call to a kept address that fails (the client's
// lock manager restarted on another port: refused, or PROG_UNAVAIL) drops it
// and asks the rpcbind again, once; any other failure drops it; an SM_NOTIFY from the host (it restarted) drops all of
// its addresses.

// nlmAddrKey is what a client's rpcbind is asked.
type nlmAddrKey struct {
	ip, network string
	prog, vers  uint32
}

// maxNLMAddrs bounds the addresses kept; past it they are all dropped.
const maxNLMAddrs = 4 * maxNLMHosts

// nlmAddrs is the kept addresses; the zero value is empty.
type nlmAddrs struct {
	mu sync.Mutex
	m  map[nlmAddrKey]string // guarded by mu
}

func (a *nlmAddrs) get(k nlmAddrKey) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	addr, ok := a.m[k]
	return addr, ok
}

func (a *nlmAddrs) put(k nlmAddrKey, addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil || len(a.m) >= maxNLMAddrs {
		a.m = map[nlmAddrKey]string{}
	}
	a.m[k] = addr
}

func (a *nlmAddrs) drop(k nlmAddrKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, k)
}

// forget drops every address of the host at ip.
func (a *nlmAddrs) forget(ip string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.m {
		if k.ip == ip {
			delete(a.m, k)
		}
	}
}

// call calls proc of prog/vers on the host at ip, at the address its rpcbind
// gave (kept, or asked now).
func (n *nlmService) call(ctx context.Context, ip, network string, prog, vers, proc uint32, args xdr.Encoder, res xdr.Decoder) error {
	k := nlmAddrKey{ip, network, prog, vers}
	addr, kept := n.addrs.get(k)
	if !kept {
		var err error
		if addr, err = n.clientAddr(ctx, ip, network, prog, vers); err != nil {
			return err
		}
		// Kept from the rpcbind's answer on, not from the call's: a call
		// to the host that starts while this one waits for its reply
		// (the next GRANTED, once the client has taken this one) uses it.
		n.addrs.put(k, addr)
	}
	err := callAt(ctx, network, addr, prog, vers, proc, args, res)
	switch {
	case err == nil:
	case kept && notThere(err) && ctx.Err() == nil:
		// Nothing of prog/vers listens at the kept address: the call was not
		// served, so asking the rpcbind and calling again cannot deliver it
		// twice (a GRANTED delivered twice could be answered DENIED).
		n.addrs.drop(k)
		return n.call(ctx, ip, network, prog, vers, proc, args, res) // not kept now: once
	default:
		n.addrs.drop(k)
	}
	return err
}

// notThere reports whether a call failed because nothing of its program and
// version listens at the address: the connection or datagram was refused, or
// the answer is PROG_UNAVAIL or PROG_MISMATCH.
func notThere(err error) bool {
	var re *sunrpc.RPCError
	if errors.As(err, &re) {
		return !re.Denied && (re.Mismatch || re.Accept == sunrpc.ProgUnavail)
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// callAt makes one call on a connection of its own to addr.
func callAt(ctx context.Context, network, addr string, prog, vers, proc uint32, args xdr.Encoder, res xdr.Decoder) error {
	c, err := sunrpc.Dial(ctx, network, addr, prog, vers, sunrpc.WithTimeout(time.Second))
	if err != nil {
		return fmt.Errorf("server: calling %s: %w", addr, err)
	}
	defer c.Close()
	if err := c.Call(ctx, proc, args, res); err != nil {
		return fmt.Errorf("server: calling %s: %w", addr, err)
	}
	return nil
}
