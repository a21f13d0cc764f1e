#!/bin/bash
# Runs as PID 1 in a tests/vm/matrix.sh guest (host root over 9p under a tmpfs overlay). Writes to
# /tpe-results: verdicts ("PASS name" / "FAIL name" per check), logs, and "done" at the end; then
# powers off. The host reads these files, never qemu's exit code.
source "$(dirname "$0")/guest_setup.sh"
export TPE_REQUIRE_KERNEL=1 TPE_IN_VM_GUEST=1  # testing::ScaledForGuest
verdict() { if [[ $2 == 0 ]]; then echo "PASS $1"; else echo "FAIL $1"; fi >>$R/verdicts; }
{
  echo "kernel: $(uname -a)"
  echo "cpus online: $(nproc)  preempt_rt: $(cat /sys/kernel/realtime 2>/dev/null || echo 0)"
} >$R/guest-info
: >$R/verdicts

# Kernel tier: every kernel-label test binary (parameterized over the perf and bpf engines),
# hotplug tests included (cpu1 of the guest can go offline without harming anyone).
start=$(date +%s)
(cd "$TPE_BUILD" && ctest -L kernel -V --timeout 1200) >$R/kernel-tier.log 2>&1
verdict "kernel-tier(ctest -L kernel)" $?
# One verdict per test binary too, so the summary names what failed.
sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*\(Passed\|Failed\|Timeout\|Not Run\).*/\1 \2/p' \
  $R/kernel-tier.log | while read -r name result; do
  verdict "ctest:$name" "$([[ $result == Passed ]] && echo 0 || echo 1)"
done
echo "kernel tier: $(($(date +%s) - start)) s" >>$R/guest-info

# e2e exact counts through the daemon, one daemon per engine.
start=$(date +%s)
bash "$TPE_SRC/tests/vm/e2e_exact.sh" "$TPE_BUILD/tracepoint_exporter" \
  "$TPE_BUILD/tests/triggers/getppid_loop" "$TPE_SRC" >$R/e2e.log 2>&1
verdict "e2e-exact-count(perf,bpf)" $?
# At full rate on the engine "auto" chooses, scraped all along from the trigger's CPU (the daemon
# and the trigger on CPU 0): where kernel code is preemptible, a task that preempts a map syscall
# has its bpf programs skipped, uncounted before 6.7 (the exporter runs its map syscalls at
# SCHED_FIFO 99 there, so no task preempts one).
TPE_E2E_ENGINES=auto TPE_E2E_PIN=0 TPE_E2E_SCRAPES=1 bash "$TPE_SRC/tests/vm/e2e_exact.sh" \
  "$TPE_BUILD/tracepoint_exporter" "$TPE_BUILD/tests/triggers/getppid_loop" "$TPE_SRC" \
  "${TPE_GUEST_E2E_N:-400000}" >$R/e2e-auto.log 2>&1
verdict "e2e-exact-count(auto,${TPE_GUEST_E2E_N:-400000} at full rate,scraped on its CPU)" $?
echo "e2e: $(($(date +%s) - start)) s" >>$R/guest-info

tainted=$(cat /proc/sys/kernel/tainted)
echo "tainted: $tainted" >>$R/guest-info
verdict "kernel-not-tainted(tainted=$tainted)" "$tainted"
dmesg >$R/dmesg.log
grep -nE 'WARNING:|BUG:|Call Trace' $R/dmesg.log >$R/dmesg-warnings.log
[[ -s $R/dmesg-warnings.log ]]
verdict "dmesg-has-no-WARN" $((1 - $?))
touch $R/done
sync
umount $R
echo o >/proc/sysrq-trigger
sleep 30
