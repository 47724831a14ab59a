# Runs in the Linux guest (--host-root): untar a tree, ls -lR it, remove it, timing
# each phase. TREE_TAR is substituted by bench/run.sh.
set -eu
t() { date +%s.%N; }
a=$(t); tar xf @TREE_TAR@; sync; b=$(t)
ls -lR . > /dev/null; c=$(t)
rm -rf tree; sync; d=$(t)
echo "BENCH untar $(echo "$b - $a" | bc)"
echo "BENCH lslR $(echo "$c - $b" | bc)"
echo "BENCH rm $(echo "$d - $c" | bc)"
echo "--- all checks passed"
