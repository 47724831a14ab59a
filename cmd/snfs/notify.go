package main

import (
	"net"
	"os"
)

// sdNotify sends state (e.g. "READY=1") to the service manager, as sd_notify(3):
// one datagram to the unix socket named by $NOTIFY_SOCKET, a path or, with a
// leading '@', a name in the abstract namespace (Go's net package maps the '@' to
// the leading NUL byte). Without $NOTIFY_SOCKET (not started by systemd with
// Type=notify) it does nothing and returns false. The variable is left set: snfs
// sends STOPPING=1 later, and starts no children that could inherit it by mistake.
func sdNotify(state string) (bool, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return false, nil
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, err
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return false, err
	}
	return true, nil
}
