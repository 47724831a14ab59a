#!/usr/bin/env bash
# Before/after of two snfs binaries on the mount benchmarks: bench/mountbench.sh
# (Andrew) and bench/mountbench2.sh (sort, reads, metadata), each run REPS=1 with
# SNFS_BIN=A or B (server and mount of the same binary), the binaries alternating
# A B, B A, A B... for $N passes; then the median per phase and configuration of
# each binary, B/A, and the server's RPCs per phase. The local disk runs in every
# run of both: its A and B columns show the noise of the machine between runs.
#
#   bash bench/mountab.sh A B (as root)   # N=3 SCRIPTS="mountbench mountbench2" LABEL_A=A LABEL_B=B
#   AGGREGATE_ONLY=1: only the tables, of the runs already in $RUNS; OUT=bench/results/x.md; CONFIGS (default "local nfs snfs": no FUSE floor, it does
#   not depend on the binary), SORT_CONFIGS (default "local nfs snfs snfs-inf"), and
#   mountbench2's PARTS, SORT_MIB, READ_MIB, NFILES, TREE pass through.
#
# Binaries of two commits: git worktree add /tmp/x COMMIT && (cd /tmp/x && go build -o /tmp/snfs-x ./cmd/snfs).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash bench/mountab.sh BIN_A BIN_B" >&2; exit 2; }
BIN_A=$(realpath "$1") BIN_B=$(realpath "$2")
cd "$(dirname "$0")/.."
N=${N:-3}
SCRIPTS=${SCRIPTS:-mountbench mountbench2}
LABEL_A=${LABEL_A:-A} LABEL_B=${LABEL_B:-B}
export CONFIGS=${CONFIGS:-local nfs snfs}
export SORT_CONFIGS=${SORT_CONFIGS:-local nfs snfs snfs-inf}
OUT=${OUT:-bench/results/mountab-$(date -u +%Y%m%d-%H%M).md}
RUNS=${RUNS:-/var/tmp/snfs-mountab} # every run's own result file, kept
START=$(date +%s)
# AGGREGATE_ONLY=1: no runs, the tables of the result files already in $RUNS
# (e.g. of a run stopped before its last pass).
if [ -n "${AGGREGATE_ONLY:-}" ]; then N=0 NRUNS="up to $(ls "$RUNS"/*-a-*.md | sed "s/.*-//; s/[.]md$//" | sort -n | tail -1)"; else rm -rf "$RUNS"; mkdir -p "$RUNS"; fi

for k in $(seq "$N"); do
  order="a b"; [ $((k % 2)) = 0 ] && order="b a"
  for s in $SCRIPTS; do
    for x in $order; do
      bin=$BIN_A; [ $x = b ] && bin=$BIN_B
      echo "pass $k $s $x ($(($(date +%s) - START)) s)" >&2
      SNFS_BIN=$bin OUT="$RUNS/$s-$x-$k.md" REPS=1 bash "bench/$s.sh" >"$RUNS/$s-$x-$k.log" 2>&1 ||
        { echo "$s with $bin failed: $RUNS/$s-$x-$k.log" >&2; tail -20 "$RUNS/$s-$x-$k.log" >&2; exit 1; }
    done
  done
done
ELAPSED=$(($(date +%s) - START))

# extract FILE: "phase cfg seconds" from the run's raw block, and "rpc phase cfg
# calls" from its RPC tables' **all** rows (columns named by the table's header).
extract() {
  awk '
    /^```/ { raw = !raw; next }
    raw && NF >= 3 { print $1, $2, $3; if ($1 ~ /^(MakeDir|Copy|ScanDir|ReadAll|Make)$/) tot[$2] += $3; next }
    /^\| phase \| procedure \|/ {
      n = split($0, h, "|"); delete col
      for (i = 4; i < n; i++) { c = h[i]; gsub(/^ +| +$/, "", c); sub(/ mode$/, "", c); col[i] = c }
      next
    }
    /^\| [^|]+ \| \*\*all\*\* \|/ {
      n = split($0, f, "|"); ph = f[2]; gsub(/ /, "", ph)
      for (i = 4; i < n; i++) if (i in col) { v = f[i]; gsub(/[ *]/, "", v); print "rpc", ph, col[i], v }
    }
    END { for (c in tot) print "Andrew-total", c, tot[c] }' "$1"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }

{
  echo "# Mount benchmarks: $LABEL_A against $LABEL_B"
  echo
  echo "Command: \`N=$N SCRIPTS=\"$SCRIPTS\" CONFIGS=\"$CONFIGS\" SORT_CONFIGS=\"$SORT_CONFIGS\"$(for v in PARTS SORT_MIB READ_MIB NFILES TREE; do [ -n "${!v:-}" ] && printf ' %s=%s' "$v" "${!v}"; done) LABEL_A=\"$LABEL_A\" LABEL_B=\"$LABEL_B\" bash bench/mountab.sh $1 $2\`"
  echo "on $(date -u '+%Y-%m-%d %H:%M') UTC, $ELAPSED s in all; $(nproc) cores, $(uname -r); **a shared machine** (other helpers building and testing at the same time)."
  [ -n "${AGGREGATE_ONLY:-}" ] && echo "Tables of the runs already in $RUNS (AGGREGATE_ONLY): $(for s in $SCRIPTS; do for x in a b; do printf '%s %s: %s runs; ' "$s" "$x" "$(ls "$RUNS/$s-$x-"*.md 2>/dev/null | wc -l)"; done; done)"
  echo "A = $BIN_A ($LABEL_A), B = $BIN_B ($LABEL_B). Each script ran ${NRUNS:-$N} times with each binary (REPS=1 each, server and mount of that binary, a fresh image each run), the binaries alternating A B, B A, ...;"
  echo "figures are medians over the ${NRUNS:-$N} runs, seconds; B/A < 1 is B faster. The local disk does not use the binary: its B/A is the noise between runs. RPCs: the server's calls of all procedures in the phase (median)."
  for s in $SCRIPTS; do
    echo
    echo "## $s"
    echo
    echo "| phase | config | $LABEL_A s | $LABEL_B s | B/A | $LABEL_A RPCs | $LABEL_B RPCs |"
    echo "|---|---|---|---|---|---|---|"
    for f in "$RUNS/$s"-*-*.md; do
      x=$(basename "$f" .md); x=${x#"$s"-}; x=${x%%-*}
      extract "$f" | sed "s/^/$x /"
    done >"$RUNS/$s.all"
    # rows: every (phase, cfg) seen, in the order of the first run's raw block
    awk '$2 != "rpc" { print $2, $3 }' "$RUNS/$s.all" | awk '!seen[$0]++' | while read -r ph cfg; do
      ta=$(awk -v p="$ph" -v c="$cfg" '$1 == "a" && $2 == p && $3 == c { print $4 }' "$RUNS/$s.all" | median)
      tb=$(awk -v p="$ph" -v c="$cfg" '$1 == "b" && $2 == p && $3 == c { print $4 }' "$RUNS/$s.all" | median)
      ra=$(awk -v p="$ph" -v c="$cfg" '$1 == "a" && $2 == "rpc" && $3 == p && $4 == c { print $5 }' "$RUNS/$s.all" | median)
      rb=$(awk -v p="$ph" -v c="$cfg" '$1 == "b" && $2 == "rpc" && $3 == p && $4 == c { print $5 }' "$RUNS/$s.all" | median)
      printf '| %s | %s | %.2f | %.2f | %s | %s | %s |\n' "$ph" "$cfg" "${ta:-0}" "${tb:-0}" \
        "$(awk -v a="${ta:-0}" -v b="${tb:-0}" 'BEGIN{if (a > 0) printf "%.2f", b/a; else print "-"}')" "${ra:--}" "${rb:--}"
    done
  done
  echo
  echo "Every run's result file: $RUNS/ (not committed)."
} >"$OUT"
cat "$OUT"
