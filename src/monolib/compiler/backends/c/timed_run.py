"""``monolib_run_timed``: ``monolib_run`` writing each fused op's time, for a profile of
the ops inside whole runs (``GraphExecutor.profile(in_run=True)``): each op finds the
caches as the ops before it left them, with nothing between them.

``int32_t monolib_run_timed(const uint8_t* params, uint8_t* arena, int64_t* ns)`` runs
the graph as ``monolib_run`` does and writes ``ns[i]``, op ``i``'s time in nanoseconds
(0 for a run-once op it skipped). It returns ``RUN_TIMED_NONE`` (-2) where it cannot
time the ops: a library whose run dispatches to specialized variants (the variants run
ops of their own), and WebAssembly, whose module imports no WASI function (a browser
gives none), so it has no clock.
"""

from __future__ import annotations

from ....abi.names import RUN_TIMED, RUN_TIMED_NONE

__all__ = ["timed_run"]

#: The clock (ns): monotonic where POSIX has one; C11's timespec_get, else clock(),
#: elsewhere (Windows); none in WebAssembly.
CLOCK = """#if !defined(__wasm__)
#include <time.h>
static int64_t ml_clock_ns(void) {
#if defined(CLOCK_MONOTONIC) && !defined(_WIN32)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
#elif defined(TIME_UTC)
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
#else
    return (int64_t)clock() * (1000000000 / CLOCKS_PER_SEC);
#endif
}
#endif"""


def timed_run(n: int, check: str, skip: str, write: str, done: str,
              variants: bool) -> tuple[str, str]:
    """(the clock helper, or ``""``; the C of ``monolib_run_timed``) for ``n`` ops in the
    table ``monolib_ops``, with ``monolib_run``'s pieces: ``check`` (stop on a failed
    op's status), ``skip`` (pass over a run-once op already run), ``write`` (the output
    shapes) and ``done`` (mark the run-once ops run); ``variants``: the run dispatches
    to specialized variants (then the function only returns ``RUN_TIMED_NONE``)."""
    head = f"MONOLIB_EXPORT int32_t {RUN_TIMED}(const uint8_t* params, uint8_t* arena, int64_t* ns) {{"
    untimed = f"  (void)params; (void)arena; (void)ns;\n  return {RUN_TIMED_NONE};"
    if not n:
        return "", f"{head}\n  (void)params; (void)arena; (void)ns;{write}\n  return 0;\n}}"
    if variants:
        return "", f"{head}\n{untimed}\n}}"
    status = "  ml_status = 0;\n" if check else ""
    body = (
        f"{status}  for (int32_t i = 0; i < {n}; ++i) {{ ns[i] = 0;{skip}\n"
        "    int64_t t0_ = ml_clock_ns(); monolib_ops[i](params, arena);"
        f" ns[i] = ml_clock_ns() - t0_;{check} }}{write}{done}\n  return 0;"
    )
    return CLOCK, f"{head}\n#if defined(__wasm__)\n{untimed}\n#else\n{body}\n#endif\n}}"
