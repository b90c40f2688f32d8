"""Run the serving application: start or join Ray, deploy, and (``monolib serve``)
serve until stopped, rolling out a library whose file was replaced.

A redeploy is ``serve.run`` of the application under the same name: the file's SHA-256
is an argument of its deployment, so Ray Serve starts replicas of the new version and
stops the old ones once those are healthy (requests in flight finish on the old ones):
no downtime.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..errors import InputError

__all__ = ["run", "serve_forever"]

logger = logging.getLogger(__name__)


def _connect(address: str | None, num_cpus: int | None) -> bool:
    """Join the Ray cluster at ``address`` (``"auto"``, ``"ray://..."``, ``host:port``) or
    start a local one; True when this call started Ray."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        return False
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    return True


def run(app_or_paths: Any, host: str = "127.0.0.1", port: int = 8000, *,
        name: str = "monolib", route_prefix: str = "/", address: str | None = None,
        num_cpus: int | None = None, blocking: bool = False, poll_s: float = 1.0,
        **options: Any) -> Any:
    """Deploy libraries (or a ready application) on Ray Serve at ``host:port``.

    Parameters
    ----------
    app_or_paths : Application, str, sequence or mapping
        A ``ray.serve`` application (e.g. from :func:`monolib.serve.deployment`), or
        what :func:`~monolib.serve.app.deployment` takes.
    host, port : str, int
        Where Serve's HTTP proxy listens (applies when this call starts Serve).
    name : str
        The application's name; running again under it redeploys (no downtime).
    route_prefix : str
        Where the application's routes start (``"/x"``: ``/x/v2/models/...``).
    address : str, optional
        Join this Ray cluster (``"auto"``, ``"ray://head:10001"``); default: the one
        this process is connected to, else a new local one.
    num_cpus : int, optional
        CPUs of a Ray started here.
    blocking : bool
        Serve until SIGINT/SIGTERM, redeploying each library whose file changes
        (given paths only); then delete the application (and stop a Ray started here).
    poll_s : float
        How often the files are looked at while blocking.
    **options
        :func:`~monolib.serve.app.deployment`'s keyword options (``replicas``,
        ``threads``, ``max_batch``, ``batch_wait_ms``, ``trusted_keys``, ``backend``...).

    Returns
    -------
    ray.serve.handle.DeploymentHandle
        The ingress's handle (after ``blocking``: None).
    """
    from ray import serve
    from ray.serve.deployment import Application

    from .app import deployment
    from .paths import model_paths

    started = _connect(address, num_cpus)
    serve.start(http_options={"host": host, "port": int(port)})
    paths = None
    if isinstance(app_or_paths, Application):
        app = app_or_paths
    else:
        paths = model_paths(app_or_paths, options.pop("model_name", None))
        app = deployment(paths, **options)
    handle = serve.run(app, name=name, route_prefix=route_prefix)
    logger.info("serving %s at http://%s:%d%s", name, host, port, route_prefix)
    if not blocking:
        return handle
    serve_forever(name, paths, options, started, poll_s, route_prefix=route_prefix)
    return None


def _stat(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def serve_forever(name: str, paths: dict[str, str] | None, options: dict,
                  started: bool, poll_s: float = 1.0, stop: threading.Event | None = None,
                  route_prefix: str = "/") -> None:
    """Wait for SIGINT/SIGTERM (or ``stop``), redeploying when a library file changes;
    then delete application ``name`` (and shut Ray down when ``started``).

    A file is redeployed once it has kept the same size, inode and mtime for one poll
    (a copy in progress is not loaded); a failed redeploy is logged and the running
    version keeps serving.
    """
    import ray
    from ray import serve

    from .app import deployment

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    seen = {p: _stat(p) for p in (paths or {}).values()}
    pending: dict[str, tuple | None] = {}
    try:
        while not stop.wait(poll_s):
            changed = False
            for p, before in seen.items():
                now = _stat(p)
                if now is None or now == before:
                    pending.pop(p, None)
                    continue
                if pending.get(p) == now:  # stable for one poll: roll it out
                    seen[p] = now
                    pending.pop(p)
                    changed = True
                else:
                    pending[p] = now
            if changed:
                try:
                    serve.run(deployment(paths, **options), name=name,
                              route_prefix=route_prefix)
                    logger.warning("redeployed %s: new library version", name)
                except Exception as exc:  # noqa: BLE001 (keep serving the old version)
                    logger.error("redeploy of %s failed, the old version keeps serving: %s",
                                 name, exc)
    finally:
        try:
            serve.delete(name)
        finally:
            if started:
                ray.shutdown()


def main(libraries: Sequence[str], *, host: str, port: int, replicas: int, threads: int,
         max_batch: int | None, batch_wait_ms: float, trusted_keys: Sequence[str] | None,
         address: str | None, backend: str = "monolib", name: str = "monolib") -> int:
    """``monolib serve``: deploy ``libraries`` and serve until stopped (exit status 0).

    Raises
    ------
    InputError
        Bad counts (``replicas``, ``threads``, ``max_batch`` < 1) or a missing file,
        before Ray is started.
    """
    if replicas < 1 or threads < 1:
        raise InputError(f"serve: --replicas and --threads must be >= 1, got {replicas}, "
                         f"{threads}")
    if max_batch is not None and max_batch < 1:
        raise InputError(f"serve: --max-batch must be >= 1, got {max_batch}")
    from .paths import model_paths

    paths = model_paths(list(libraries))  # a missing file fails here, before Ray starts
    t0 = time.perf_counter()
    num_cpus = max(os.cpu_count() or 1, replicas * threads * len(paths))
    options = {"replicas": replicas, "threads": threads, "max_batch": max_batch,
               "batch_wait_ms": batch_wait_ms, "trusted_keys": trusted_keys,
               "backend": backend}
    run(paths, host, port, name=name, address=address, num_cpus=num_cpus, **options)
    print(f"monolib serve: {', '.join(paths)} at http://{host}:{port}/v2 "
          f"(ready in {time.perf_counter() - t0:.1f} s; Ctrl-C stops)", flush=True)
    serve_forever(name, paths, options, started=address is None)
    return 0
