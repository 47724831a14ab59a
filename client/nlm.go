package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"snfs/nlm4"
	"snfs/portmap"
	"snfs/sunrpc"
)

// NLM is a client of a server's Network Lock Manager, version 4 (RFC 1813
// Appendix II; XNFS chapter 10): the byte-range locks of an nfs mode mount
// (docs/mount.md, "Locks in nfs mode"). It sends the synchronous procedures
// only (TEST, LOCK, CANCEL, UNLOCK); a blocked LOCK's grant comes as a
// GRANTED call to the mount's own lock manager, which the caller serves. Every
// call is answered (a status) or fails (an RPC error); the status is the
// caller's to read.
type NLM struct {
	rpc *sunrpc.Client
	// CallerName is this host's name as the server knows its locks and
	// monitors it (caller_name).
	CallerName string
	cookie     atomic.Uint64
}

// FindNLM asks the rpcbind of host (at rpcbindPort, 111 by default) for the
// port of NLM v4 over TCP and returns its address.
func FindNLM(ctx context.Context, host string, rpcbindPort int) (string, error) {
	if rpcbindPort == 0 {
		rpcbindPort = 111
	}
	pm, err := sunrpc.Dial(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(rpcbindPort)), portmap.Program, portmap.Version,
		sunrpc.WithTimeout(5*time.Second))
	if err != nil {
		return "", fmt.Errorf("client: the rpcbind of %s: %w", host, err)
	}
	defer pm.Close()
	port, err := portmap.GetPort(ctx, pm, nlm4.Program, nlm4.Version, portmap.ProtoTCP)
	if err != nil {
		return "", fmt.Errorf("client: the rpcbind of %s: %w", host, err)
	}
	if port == 0 {
		return "", fmt.Errorf("client: %s runs no NLM v4 over TCP (its rpcbind has no lock manager)", host)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// DialNLM connects to the lock manager at addr.
func DialNLM(ctx context.Context, addr, callerName string) (*NLM, error) {
	c, err := sunrpc.Dial(ctx, "tcp", addr, nlm4.Program, nlm4.Version)
	if err != nil {
		return nil, fmt.Errorf("client: NLM at %s: %w", addr, err)
	}
	return &NLM{rpc: c, CallerName: callerName}, nil
}

// Close closes the connection.
func (c *NLM) Close() error { return c.rpc.Close() }

func (c *NLM) nextCookie() []byte { return binary.BigEndian.AppendUint64(nil, c.cookie.Add(1)) }

// Test is NLM4 TEST: the holder when Denied.
func (c *NLM) Test(ctx context.Context, l nlm4.Lock, excl bool) (*nlm4.TestRes, error) {
	l.CallerName = c.CallerName
	var res nlm4.TestRes
	if err := c.rpc.Call(ctx, nlm4.ProcTest, &nlm4.TestArgs{Cookie: c.nextCookie(), Exclusive: excl, Lock: l}, &res); err != nil {
		return nil, fmt.Errorf("client: NLM TEST: %w", err)
	}
	return &res, nil
}

// Lock is NLM4 LOCK; with block, a conflict is answered Blocked and the grant
// comes as a GRANTED call (or the same LOCK sent again finds it granted).
// state is this host's NSM state number.
func (c *NLM) Lock(ctx context.Context, l nlm4.Lock, excl, block bool, state int32) (nlm4.Stat, error) {
	l.CallerName = c.CallerName
	var res nlm4.Res
	a := nlm4.LockArgs{Cookie: c.nextCookie(), Block: block, Exclusive: excl, Lock: l, State: state}
	if err := c.rpc.Call(ctx, nlm4.ProcLock, &a, &res); err != nil {
		return 0, fmt.Errorf("client: NLM LOCK: %w", err)
	}
	return res.Stat, nil
}

// Reclaim is NLM4 LOCK with reclaim TRUE and without block: a lock this
// host held before the server restarted, sent again in the server's grace
// period.
func (c *NLM) Reclaim(ctx context.Context, l nlm4.Lock, excl bool) (nlm4.Stat, error) {
	l.CallerName = c.CallerName
	var res nlm4.Res
	a := nlm4.LockArgs{Cookie: c.nextCookie(), Exclusive: excl, Lock: l, Reclaim: true}
	if err := c.rpc.Call(ctx, nlm4.ProcLock, &a, &res); err != nil {
		return 0, fmt.Errorf("client: NLM LOCK (reclaim): %w", err)
	}
	return res.Stat, nil
}

// Unlock is NLM4 UNLOCK.
func (c *NLM) Unlock(ctx context.Context, l nlm4.Lock) (nlm4.Stat, error) {
	l.CallerName = c.CallerName
	var res nlm4.Res
	if err := c.rpc.Call(ctx, nlm4.ProcUnlock, &nlm4.UnlockArgs{Cookie: c.nextCookie(), Lock: l}, &res); err != nil {
		return 0, fmt.Errorf("client: NLM UNLOCK: %w", err)
	}
	return res.Stat, nil
}

// Cancel is NLM4 CANCEL: withdraw a blocked LOCK (named by its lock).
func (c *NLM) Cancel(ctx context.Context, l nlm4.Lock, excl bool) (nlm4.Stat, error) {
	l.CallerName = c.CallerName
	var res nlm4.Res
	if err := c.rpc.Call(ctx, nlm4.ProcCancel, &nlm4.CancArgs{Cookie: c.nextCookie(), Block: true, Exclusive: excl, Lock: l}, &res); err != nil {
		return 0, fmt.Errorf("client: NLM CANCEL: %w", err)
	}
	return res.Stat, nil
}

// GrantedRes is NLM4 GRANTED_RES: this host's answer to the server's
// GRANTED_MSG, cookie its cookie.
func (c *NLM) GrantedRes(ctx context.Context, cookie []byte, st nlm4.Stat) error {
	if err := c.rpc.Call(ctx, nlm4.ProcGrantedRes, &nlm4.Res{Cookie: cookie, Stat: st}, nil); err != nil {
		return fmt.Errorf("client: NLM GRANTED_RES: %w", err)
	}
	return nil
}

// FreeAll is NLM4 FREE_ALL: the server releases every lock and share
// reservation of this caller_name (from this address): a client that
// restarted tells the server so this way when it runs no status monitor.
func (c *NLM) FreeAll(ctx context.Context, state int32) error {
	if err := c.rpc.Call(ctx, nlm4.ProcFreeAll, &nlm4.Notify{Name: c.CallerName, State: state}, nil); err != nil {
		return fmt.Errorf("client: NLM FREE_ALL: %w", err)
	}
	return nil
}
