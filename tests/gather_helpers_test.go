package tests

import (
	"io"
	"log/slog"
	"os"

	"snfs/store"
)

func init() {
	defaultSync = func(n *store.Node, dataOnly bool) error { return (&store.Store{}).Sync(n, dataOnly) }
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func readFileNoCache(path string) ([]byte, error) { return os.ReadFile(path) }
