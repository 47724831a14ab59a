#!/usr/bin/env bash
# Lone-writer check for write gathering: one FILE_SYNC write in flight (N=1), 8 KiB
# and 64 KiB writes, --write-gather off and adaptive in ROUNDS paired rounds (a fresh
# server for each run, the order swapped every round, the disk synced before each).
# The disk's fsync latency drifts by more than the effect measured, so each round's
# adaptive/off ratio is taken within the round, and the table gives the mean of those
# ratios with a 95% confidence interval, their median, and the time the adaptive
# server itself recorded as spent waiting to gather (it should be zero: a lone
# writer never waits). The target is adaptive >= 0.97x off.
# Writes bench/results/lone-writer-<date>.md.
#   bash bench/lone-writer.sh      (as root; ROUNDS=20 TOTAL=16777216 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
ROUNDS=${ROUNDS:-20}
TOTAL=${TOTAL:-$((16 << 20))}
W=/var/tmp/snfs-lone
rm -rf "$W"; mkdir -p "$W"/{exp,bin}
go build -o "$W/bin/snfs" ./cmd/snfs
go build -o "$W/bin/wgbench" ./bench/wgbench
PORT=24049 MPORT=39124
out="bench/results/lone-writer-$(date -u +%Y%m%d-%H%M).md"
# stats: reads "off adaptive" pairs, prints mean ratio, CI half-width, median ratio.
stats() {
  awk '{print $2/$1}' | sort -g | awk '{r[NR]=$1; s+=$1} END {
    n=NR; m=s/n; for (i=1;i<=n;i++) v+=(r[i]-m)^2; sd=sqrt(v/(n-1));
    med=(n%2)?r[(n+1)/2]:(r[n/2]+r[n/2+1])/2;
    printf "%.3f %.3f %.3f\n", m, 2.09*sd/sqrt(n), med }'
}
{
  echo "# Lone writer: write gathering off vs adaptive (N = 1)"
  echo
  echo "Command: \`ROUNDS=$ROUNDS TOTAL=$TOTAL bash bench/lone-writer.sh\` on $(date -u +%Y-%m-%d), ext4 /var/tmp; client bench/wgbench, $((TOTAL >> 20)) MiB of FILE_SYNC writes per run, one in flight; $ROUNDS rounds of one run per mode (order swapped every round), a fresh server and a synced disk for each run."
  echo "Ratio = adaptive/off within each round; CI = 95% confidence interval of the mean ratio (t, $((ROUNDS - 1)) d.f.). Wait = the adaptive server's own snfs_server_write_gather_wait_seconds_total over all its runs."
  echo
  echo "| size | off MiB/s (mean) | adaptive MiB/s (mean) | adaptive/off, mean ± 95% CI | median ratio | adaptive wait, s | runs (off/adaptive per round) |"
  echo "|---|---|---|---|---|---|---|"
  for size in 8192 65536; do
    pairs=""; runs=""; wait_s=0
    for r in $(seq $ROUNDS); do
      order="off adaptive"; [ $((r % 2)) = 0 ] && order="adaptive off"   # cancel order bias
      declare -A v=()
      for mode in $order; do
        rm -f "$W/exp/wgbench.dat"; sync; sleep 0.2   # each run starts from a settled disk
        "$W/bin/snfs" serve --nfs-port $PORT --mount-port $PORT --state-dir "$W/state" --write-gather $mode \
          --metrics 127.0.0.1:$MPORT --export-options rw,no_root_squash "$W/exp" 2>>"$W/snfs.log" &
        pid=$!; sleep 0.3
        v[$mode]=$("$W/bin/wgbench" -addr 127.0.0.1:$PORT -export "$W/exp" -size $size -n 1 -total $TOTAL | sed -n 's/.*mib_s=\([0-9.]*\).*/\1/p')
        if [ $mode = adaptive ]; then
          w=$(curl -s 127.0.0.1:$MPORT/metrics | awk '/^snfs_server_write_gather_wait_seconds_total/ {s+=$NF} END {print s+0}')
          wait_s=$(echo "$wait_s + $w" | bc -l)
        fi
        kill $pid; wait $pid || true
      done
      pairs="$pairs${v[off]} ${v[adaptive]}"$'\n'; runs="$runs ${v[off]}/${v[adaptive]}"
    done
    read -r mean ci med < <(printf '%s' "$pairs" | stats)
    offm=$(printf '%s' "$pairs" | awk '{s+=$1} END {printf "%.1f", s/NR}')
    adm=$(printf '%s' "$pairs" | awk '{s+=$2} END {printf "%.1f", s/NR}')
    echo "| $((size / 1024)) KiB | $offm | $adm | $mean ± $ci | $med | $wait_s |$runs |"
  done
} > "$out"
cat "$out"
