module snfs

go 1.26.0

require golang.org/x/sys v0.49.0

require github.com/coreos/go-systemd/v22 v22.7.0
