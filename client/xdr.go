package client

import "snfs/xdr"

type (
	xdrReader  = xdr.Reader
	xdrEncoder = xdr.Encoder
)
