package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// explainDial turns a failure to connect to the server into a message a user
// can act on: the dial's own error, which names the network and address once
// ("dial tcp 127.0.0.1:2049: connect: connection refused"), and what to check.
// The wrapping around it ("connect to NFS at ADDR: ...", "snfs session ...")
// said the same again and is dropped. Other errors are returned as they are.
func explainDial(err error) error {
	var op *net.OpError
	if err == nil || !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	addr := "that address"
	if op.Addr != nil {
		addr = op.Addr.String()
	}
	var dns *net.DNSError
	var hint string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		hint = fmt.Sprintf("is `snfs serve` running at %s? (a server on other ports: --nfs-port=N, --mount-port=N)", addr)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		hint = "is the server's host up and reachable from here?"
	case errors.As(err, &dns):
		hint = "is the server's name right?"
	case op.Timeout(), errors.Is(err, context.DeadlineExceeded):
		hint = fmt.Sprintf("nothing answered at %s: is the server's host up, and the port open in its firewall?", addr)
	default:
		return op
	}
	return fmt.Errorf("%w: %s", op, hint)
}
