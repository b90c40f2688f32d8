"""threadpool.h's jobs in quick succession: a worker never runs a task a job did not have.

A worker that finished its share of a job loops once more on the job's ticket. If the
caller meanwhile started the next job, the worker could read the new job's task count,
find the old ticket's index below it and win the compare-and-swap on the old ticket:
it then ran task ``n`` of a job of ``n`` tasks, with either job's function and context
(in a model at two threads: a depthwise task reading a GEMM's job, a division by zero,
about once in 10,000 runs of MnasNet). The caller now closes the old ticket before
publishing the new job. Two million tiny jobs, 7 and 2 tasks in turn, on two threads:
every job runs each of its tasks exactly once and nothing runs a task of a finished job
(the code before the fix failed this about 75 times in two million jobs).
"""

from __future__ import annotations

import ctypes

from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.testing import build_shared

SRC = r"""
#include <stdint.h>
#include <string.h>
""" + kernel_header("threadpool.h") + r"""
typedef struct { int64_t magic, n, count; } job_t;
static int64_t bad;
static void task(void* ctx, int64_t i, void* s) {
    (void)s;
    job_t* j = (job_t*)ctx;
    if (j->magic != 0x5eed || i < 0 || i >= j->n) __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&j->count, 1, __ATOMIC_RELAXED);
}
/* jobs of 7 and 2 tasks in turn; returns tasks run outside their job plus a million per
 * job that did not run each of its tasks once */
int64_t stress(int64_t jobs) {
    ml_set_num_threads(2);
    ml_set_spin(1000000);
    for (int64_t k = 0; k < jobs; ++k) {
        job_t j = {0x5eed, (k & 1) ? 2 : 7, 0};
        ml_parallel_for(j.n, task, &j, 0, 0);
        if (__atomic_load_n(&j.count, __ATOMIC_RELAXED) != j.n) bad += 1000000;
        __atomic_store_n(&j.magic, 0, __ATOMIC_RELAXED); /* over: a late task sees it */
    }
    ml_pool_stop();
    return bad;
}
"""


def test_no_task_runs_outside_its_job() -> None:
    # the workers are never judged late (no back-off to serial runs)
    lib = build_shared(SRC, ["-DML_LATE_NS=1000000000000", "-DML_PAR_MIN_MEM=0"])
    lib.stress.restype = ctypes.c_int64
    lib.stress.argtypes = [ctypes.c_int64]
    assert lib.stress(2_000_000) == 0
