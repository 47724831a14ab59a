# Sourced by the benchmarks that run the Linux guest (../shared/tools/linux-nfs-client):
# guest_run runs its run.sh with tests/guest/uml-xstate.c preloaded, without which
# User-Mode-Linux panics at boot on hosts with AMX (the shim's comment says why).
# Needs $W (the benchmark's work directory) and $SHARED; run from the repository root.
guest_run() {
  if [ ! -f "$W/uml-xstate.so" ]; then
    cc -O2 -shared -fPIC -o "$W/uml-xstate.so" tests/guest/uml-xstate.c -ldl || return 1
  fi
  LD_PRELOAD="$W/uml-xstate.so${LD_PRELOAD:+:$LD_PRELOAD}" "$SHARED/tools/linux-nfs-client/run.sh" "$@"
}
