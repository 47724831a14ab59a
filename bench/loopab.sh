#!/usr/bin/env bash
# Two snfs builds compared on bench/coda.sh's "files" loop ($NFILES x create,
# close, unlink of one file) on an snfs-mode mount (flags $SNFS_OPTS, default
# --permits=on), the server direct (no delay proxy: delay 0), alternating the
# builds within each of $ROUNDS rounds (the order swapped every other round),
# a fresh mount and cache directory per run; one server (the AFTER build).
# Prints each run's seconds and the medians.
#
#   BEFORE=/tmp/snfs-before AFTER=/tmp/snfs-after NFILES=5000 ROUNDS=11 bash bench/loopab.sh
set -euo pipefail
: "${BEFORE:?a built snfs}" "${AFTER:?a built snfs}"
NFILES=${NFILES:-1000} ROUNDS=${ROUNDS:-7} SNFS_OPTS=${SNFS_OPTS:---permits=on}
W=${W:-/var/tmp/snfs-loopab} PORT=${PORT:-23361} MPORT=${MPORT:-23362}
rm -rf "$W"; mkdir -p "$W/export" "$W/state" "$W/mnt"
"$AFTER" serve --bind 127.0.0.1 --nfs-port "$PORT" --mount-port "$PORT" --state-dir "$W/state" \
  --metrics "127.0.0.1:$MPORT" --export-options rw,no_root_squash "$W/export" 2>"$W/serve.log" &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$MPORT/metrics" >/dev/null && break; sleep 0.1; done
files() { perl -e 'my ($d, $n) = @ARGV; for my $i (1 .. $n) {
  open(my $f, ">", "$d/f$i") or die "create $d/f$i: $!"; close($f) or die "close: $!";
  unlink("$d/f$i") or die "unlink $d/f$i: $!" }' "$1" "$NFILES"; }
declare -A BIN=([before]=$BEFORE [after]=$AFTER) T
for r in $(seq "$ROUNDS"); do
  order="before after"; [ $((r % 2)) = 0 ] && order="after before"
  for b in $order; do
    c=$W/cache-$b-$r m=$W/mnt/$b; mkdir -p "$m"
    "${BIN[$b]}" mount --nfs-port "$PORT" --mount-port "$PORT" --mode snfs $SNFS_OPTS --cache-dir "$c" \
      "127.0.0.1:$W/export" "$m" >>"$W/mount-$b.log" 2>&1
    d=$m/$b-r$r; mkdir "$d"; ls "$d" >/dev/null
    a=$(date +%s.%N); files "$d"; e=$(date +%s.%N)
    t=$(echo "$e - $a" | bc); T[$b]="${T[$b]:-} $t"; echo "round $r $b $t"
    "${BIN[$b]}" umount "$m"
    rm -rf "$c"
  done
done
med() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median before $(med "${T[before]}") s, after $(med "${T[after]}") s (NFILES=$NFILES, $ROUNDS rounds, $SNFS_OPTS)"
