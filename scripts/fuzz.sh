#!/usr/bin/env bash
# A short run of every fuzz target (scripts/test.sh's fuzz step): FUZZTIME
# executions each (FUZZTIME_MODEL for lockmgr's FuzzModel), one target after
# the other, each with as many workers as cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
# An execution count, not a duration: a duration budget races Go's fuzz coordinator
# at the deadline and fails with a bare "context deadline exceeded" and no crasher
# (golang/go#75804, fixed only in Go 1.27).
FUZZTIME=${FUZZTIME:-50000x}
mod=$(go list -m)
cache=$(go env GOCACHE)/fuzz
bins=$(mktemp -d /tmp/snfs-fuzz.XXXXXX)
trap 'rm -rf "$bins"' EXIT
for pkg in ./xdr ./sunrpc ./nfs3 ./mount3 ./portmap ./server ./store ./store/attrcache ./state ./snfs1 ./nlm4 ./nsm ./mount/cachedir ./drcstore ./lockmgr ./mount/cml; do
  # lockmgr's FuzzModel runs a whole lock table per input: fewer, longer executions.
  fz=$FUZZTIME; [ "$pkg" = ./lockmgr ] && fz=${FUZZTIME_MODEL:-5000x}
  # One fuzz-instrumented test binary per package, built once and run for each
  # of its targets: `go test -fuzz` builds and links one per target (and
  # `go test -list` another), most of this step's time before.
  bin=$bins/$(echo "${pkg#./}" | tr / _).test
  go test -c -fuzz=. -o "$bin" "$pkg"
  [ -x "$bin" ] || continue # a package without tests has no binary
  for target in $("$bin" -test.list '^Fuzz' | grep '^Fuzz' || true); do
    # cml's FuzzOptimize replays each random log on an in-memory tree twice:
    # slow executions, so the model's count.
    tfz=$fz; [ "$target" = FuzzOptimize ] && tfz=${FUZZTIME_MODEL:-5000x}
    # What `go test -fuzz` gives the binary: the package's directory (its
    # testdata/fuzz seeds, and where a failing input is written), go's fuzz
    # cache for the package, its default timeout.
    (cd "$pkg" && "$bin" -test.paniconexit0 -test.timeout=10m -test.run='^$' -test.fuzz="^${target}\$" \
      -test.fuzztime="$tfz" -test.fuzzcachedir="$cache/$mod/${pkg#./}") >"$bins/log" 2>&1 ||
      { cat "$bins/log"; echo "fuzz target $target failed"; exit 1; }
    echo "ok   fuzz $pkg $target"
  done
done
