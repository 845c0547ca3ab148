"""The calling thread of a timed IREE tool at idle priority, so that it never takes a core
from IREE's workers.

`iree-benchmark-module` on IREE's local-task device computes on worker threads
("iree-worker-N", one per core) while its main thread waits for each call to finish, and
that wait is not idle: on the 2-core Zen 5 VM it took 1.5 s of CPU in a 5 s run
(`/proc/PID/task/TID/stat`) against 2.4 s for each worker, and when the scheduler put it
on a worker's core the module ran up to 1.6x slower. The same tuned module was timed at
1.22-1.88 ms by the tool as it is and 1.16-1.18 ms with its main thread at SCHED_IDLE
(six repetitions each, two alternations), and at 1.20-1.25 ms by IREE's Python runtime
(`iree.runtime` calls, whose wait does not compete): the idle caller measures what a
deployed module does, and stops a candidate's time from depending on where the scheduler
put a waiting thread.

Only the main thread is lowered: Linux scheduling policies are per thread and a thread
created later inherits its creator's, so the change waits until the workers exist (they
are created together when the device is, about 5 ms after start, before the benchmark's
warm-up). An unprivileged process may always lower its own threads' priority. Where the
platform has no SCHED_IDLE (not Linux), nothing changes.
"""
from __future__ import annotations

import os
import threading
import time

WORKER_PREFIX = "iree-worker"  # IREE's task executor names its threads so
POLL_S = 0.001
GIVE_UP_S = 10.0  # a tool that never starts workers (local-sync, a failed load)


def supported() -> bool:
    return hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE")


def _threads(pid: int) -> dict[str, str]:
    """tid -> thread name of a live process; empty once it is gone."""
    names = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names[tid] = f.read().strip()
        # The thread or the process ended between the listing and the read (ESRCH when
        # the process is a zombie).
        except (FileNotFoundError, ProcessLookupError):
            continue
    return names


def lower_when_workers_exist(pid: int) -> bool:
    """Wait until `pid` has IREE worker threads and no new thread appeared for one poll,
    then put its main thread (tid == pid) at SCHED_IDLE. False if the process ended or
    never started workers within GIVE_UP_S."""
    deadline = time.monotonic() + GIVE_UP_S
    previous: set[str] = set()
    while time.monotonic() < deadline:
        threads = _threads(pid)
        if not threads:
            return False
        current = set(threads)
        workers = [n for n in threads.values() if n.startswith(WORKER_PREFIX)]
        if workers and current == previous:
            try:
                os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
            except ProcessLookupError:
                return False
            return True
        previous = current
        time.sleep(POLL_S)
    return False


def lower_this_thread() -> bool:
    """Put the calling thread (only it) at SCHED_IDLE; False where there is none."""
    if not supported():
        return False
    os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))
    return True


def idle_caller(pid: int) -> None:
    """Start lowering `pid`'s main thread in the background (see the module's doc)."""
    if supported():
        threading.Thread(target=lower_when_workers_exist, args=(pid,), daemon=True,
                         name=f"idle-caller-{pid}").start()
