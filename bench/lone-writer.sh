#!/usr/bin/env bash
# Lone-writer check for write gathering: one FILE_SYNC write in flight (N=1), 64 MiB,
# 8 KiB and 64 KiB writes, --write-gather off and adaptive alternating for ROUNDS
# rounds (a fresh server each run, order swapped every round, disk synced before each); prints per-run figures and the means, and writes
# bench/results/lone-writer-<date>.md. The target is adaptive >= 0.97x off.
#   bash bench/lone-writer.sh      (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
ROUNDS=${ROUNDS:-6}
W=/var/tmp/snfs-lone
rm -rf "$W"; mkdir -p "$W"/{exp,bin}
go build -o "$W/bin/snfs" ./cmd/snfs
go build -o "$W/bin/wgbench" ./bench/wgbench
PORT=24049
out="bench/results/lone-writer-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# Lone writer: write gathering off vs adaptive (N = 1)"
  echo
  echo "Command: \`ROUNDS=$ROUNDS bash bench/lone-writer.sh\` on $(date -u +%Y-%m-%d), ext4 /var/tmp; client bench/wgbench, 64 MiB of FILE_SYNC writes, one in flight; modes alternate (order swapped every round), fresh server and a synced disk for each run."
  echo
  echo "| size | off MiB/s (mean of $ROUNDS) | adaptive MiB/s (mean of $ROUNDS) | adaptive/off | runs (off / adaptive) |"
  echo "|---|---|---|---|---|"
  for size in 8192 65536; do
    declare -A sum=([off]=0 [adaptive]=0); runs=""
    for r in $(seq $ROUNDS); do
      order="off adaptive"; [ $((r % 2)) = 0 ] && order="adaptive off"   # cancel order bias
      for mode in $order; do
        rm -f "$W/exp/wgbench.dat"; sync; sleep 0.2   # each run starts from a settled disk
        "$W/bin/snfs" serve --nfs-port $PORT --mount-port $PORT --state-dir "$W/state" --write-gather $mode \
          --export-options rw,no_root_squash "$W/exp" 2>>"$W/snfs.log" &
        pid=$!; sleep 0.3
        v=$("$W/bin/wgbench" -addr 127.0.0.1:$PORT -export "$W/exp" -size $size -n 1 -total $((64 << 20)) | sed -n 's/.*mib_s=\([0-9.]*\).*/\1/p')
        kill $pid; wait $pid || true
        sum[$mode]=$(echo "${sum[$mode]} + $v" | bc -l); runs="$runs $mode:$v"
      done
    done
    off=$(echo "scale=1; ${sum[off]} / $ROUNDS" | bc -l); ad=$(echo "scale=1; ${sum[adaptive]} / $ROUNDS" | bc -l)
    echo "| $((size / 1024)) KiB | $off | $ad | $(echo "scale=3; $ad / $off" | bc -l) |$runs |"
  done
} > "$out"
cat "$out"
