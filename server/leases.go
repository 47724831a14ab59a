package server

import (
	"errors"

	"snfs/consist"
	"snfs/store"
)

// storeLeases adapts the store's file leases to the consistency driver
// (consist.Leaser): the store's error for a file open elsewhere becomes the
// driver's.
type storeLeases struct{ st *store.Store }

func (l storeLeases) Lease(fh []byte) error {
	err := l.st.Lease(fh)
	if errors.Is(err, store.ErrLeaseHeld) {
		return consist.ErrOpenElsewhere
	}
	return err
}

func (l storeLeases) Unlease(fh []byte) { l.st.Unlease(fh) }
