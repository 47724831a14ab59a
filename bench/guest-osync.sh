# Runs in the Linux guest (--host-root) on a mount with -o sync: 4 threads of O_SYNC
# 8 KiB writes to one file (each thread its own quarter), timed.
set -eu
t() { date +%s.%N; }
a=$(t)
for i in 0 1 2 3; do
  dd if=/dev/zero of=osync.dat bs=8k count=512 seek=$((i * 512)) oflag=sync conv=notrunc 2>/dev/null &
done
wait
b=$(t)
echo "BENCH osync_mib_s $(echo "scale=2; 16 / ($b - $a)" | bc -l)"
rm -f osync.dat
echo "--- all checks passed"
