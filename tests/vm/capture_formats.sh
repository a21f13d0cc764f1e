#!/bin/bash
# A tests/vm/matrix.sh guest script (TPE_VM_GUEST) that captures test data from a guest kernel
# instead of running the tests: the tracefs format files of the events the unit tests read and
# of every event whose format the parser once refused, and tracefs's README (the probe syntax the
# kernel accepts), into the results share as linux-<version>/events/<system>/<event>/format and
# linux-<version>/README. Copy them to tests/data/ by hand.
#   TPE_VM_GUEST=$PWD/tests/vm/capture_formats.sh tests/vm/matrix.sh build bullseye/linux-image-amd64
source "$(dirname "$0")/guest_setup.sh"
: >$R/verdicts
T=/sys/kernel/tracing
ver=$(uname -r | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')
out=$R/linux-$ver
mkdir -p "$out/events"
cp $T/README "$out/README"
# The events the unit tests use, and any whose array lengths are not plain numbers.
want="sched/sched_switch sched/sched_waking sched/sched_wakeup sched/sched_process_exec sched/sched_process_fork
 syscalls/sys_enter_getppid syscalls/sys_exit_read syscalls/sys_enter_openat raw_syscalls/sys_enter
 raw_syscalls/sys_exit tcp/tcp_retransmit_skb tcp/tcp_probe block/block_rq_issue block/block_rq_complete
 net/net_dev_xmit irq/irq_handler_entry irq/irq_handler_exit signal/signal_generate oom/mark_victim"
for e in $want; do
  [[ -f $T/events/$e/format ]] && mkdir -p "$out/events/$e" && cp "$T/events/$e/format" "$out/events/$e/format"
done
for f in $T/events/*/*/format; do
  if grep -qE 'field:[^;]*\[[^]]*[^] 0-9][^]]*\]' "$f"; then
    e=${f#$T/events/}
    e=${e%/format}
    mkdir -p "$out/events/$e" && cp "$f" "$out/events/$e/format"
  fi
done
echo "PASS captured $(find "$out/events" -name format | wc -l) format files" >>$R/verdicts
touch $R/done
sync
umount $R
echo o >/proc/sysrq-trigger
sleep 30
