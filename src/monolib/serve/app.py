"""The Ray Serve application: one deployment per library, speaking the Open Inference
Protocol v2 over HTTP.

Each :class:`ModelServer` replica loads its library once (:mod:`.backend`), batches
concurrent requests with ``@serve.batch`` (:mod:`.batching`) and answers every route of
the protocol (:mod:`.protocol`); a request never kills it (every error becomes an
answer). With one library the model deployment is the HTTP ingress itself (no extra
hop); with several a small :class:`Router` ingress forwards each model's requests to
its deployment. Overload: each replica takes ``max_ongoing_requests`` at once and each
deployment queues ``max_queued_requests`` more; past that Ray Serve answers 503.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.serve.exceptions import BackPressureError
from starlette.requests import Request
from starlette.responses import Response

from .. import __version__
from ..errors import InputError, MonolibError, RequestError
from . import protocol
from .backend import open_backend
from .batching import find_batch_dim, plan, run_batched
from .paths import file_digest, model_paths

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ModelServer", "Router", "deployment", "file_digest",
           "model_paths"]

logger = logging.getLogger(__name__)

#: a request body above this is refused with 413 before it is read whole
DEFAULT_MAX_BODY_BYTES = 64 << 20
_JSON = {"content-type": "application/json"}


def _server_route(r: Any) -> tuple[int, dict, bytes] | None:
    """The answer to a server-level route (health, server metadata), the same from a
    model's replica and from the router; None for a model route."""
    if r.kind in ("live", "ready"):
        return 200, {}, b""
    if r.kind == "server":
        return 200, dict(_JSON), json.dumps(protocol.server_metadata(__version__)).encode()
    return None


#: requests a multi-model application's router holds at once (it only forwards them)
ROUTER_MAX_ONGOING = 1024


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to be over ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"request body of {declared} bytes is over the limit of {limit}",
                           413)
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(f"request body over the limit of {limit} bytes", 413)
        parts.append(chunk)
    return b"".join(parts)


def _path(request: Request) -> str:
    path, root = request.url.path, request.scope.get("root_path") or ""
    return path[len(root):] if root and path.startswith(root) else path


def _error(exc: BaseException, status: int) -> tuple[int, dict, bytes]:
    return status, dict(_JSON), protocol.error_body(str(exc))


async def _http(server: Any, request: Request) -> Response:
    """Read ``request`` and answer it with ``server.handle``."""
    try:
        body = await _read_body(request, server.max_body_bytes)
    except RequestError as exc:
        status, headers, payload = _error(exc, exc.status)
    else:
        headers = {protocol.HEADER_LENGTH: request.headers.get(protocol.HEADER_LENGTH)}
        status, headers, payload = await server.handle(request.method, _path(request),
                                                       headers, body)
    return Response(payload, status_code=status, headers=headers)


@serve.deployment
class ModelServer:
    """One model's Ray Serve deployment (see the module's doc).

    Parameters
    ----------
    name : str
        The model's name in the protocol's paths.
    path : str
        The library (the ``.onnx`` for ``backend="onnxruntime"``), at this absolute
        path on every node, or by its file name in the replica's working directory
        (Ray's ``runtime_env={"working_dir": ...}``).
    backend : str
        ``"monolib"`` or ``"onnxruntime"``.
    threads : int
        Threads of the replica's model (its own pool).
    max_batch : int, optional
        Rows per run at most (default: the batch dim's upper bound).
    batch_wait_ms : float
        How long a batch waits for more requests.
    trusted_keys : sequence, optional
        Keys the library's signature must verify against before it is loaded.
    digest : str, optional
        The file's SHA-256: a new digest makes Ray Serve roll out new replicas.
    max_body_bytes : int
        Larger request bodies get 413.
    """

    def __init__(self, name: str, path: str, *, backend: str = "monolib", threads: int = 1,
                 max_batch: int | None = None, batch_wait_ms: float = 5.0,
                 trusted_keys: Sequence[Any] | None = None, digest: str | None = None,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        if not os.path.exists(path) and os.path.exists(os.path.basename(path)):
            path = os.path.basename(path)  # shipped in Ray's runtime_env working_dir
        self.backend = open_backend(backend, path, threads=threads, trusted_keys=trusted_keys,
                                    slots=1)
        self.model = protocol.ModelSpec(name, self.backend.inputs, self.backend.outputs,
                                        version="1", platform=backend)
        self.digest = digest
        self.max_body_bytes = max_body_bytes
        self.batch = find_batch_dim(self.backend.inputs, self.backend.outputs, max_batch)
        # the batch queue per instance (@serve.batch on the class keeps one queue in the
        # class, shared by every instance of a process and unpicklable once used)
        self._infer_batch = serve.batch(
            max_batch_size=self.batch.limit if self.batch else 1,
            batch_wait_timeout_s=batch_wait_ms / 1000.0 if self.batch else 0.0,
        )(self._run_requests)
        self._metadata = json.dumps(protocol.model_metadata(self.model)).encode()
        self.stats = {"requests": 0, "runs": 0}  # what batching saved, for tests and tools
        logger.info("model %r ready: %s, batch %s, %d thread(s)", name, path, self.batch,
                    threads)

    async def _run_requests(self, requests: list[dict]) -> list:
        """A batch of requests' feeds -> their outputs (or exceptions), in order."""
        self.stats["requests"] += len(requests)
        self.stats["runs"] += len(plan(requests, self.batch))
        # on the event loop's thread: one batch runs at a time per replica anyway, and a
        # hop to a worker thread cost 0.3 ms of CPU and 0.8 ms of latency per request
        # (PP-OCR cls, batch 1: 1.0 vs 1.3 ms of CPU, the run itself 0.65)
        return run_batched(self.backend.run, requests, self.batch)

    async def __call__(self, request: Request) -> Response:
        """HTTP entry when this deployment is the application's ingress."""
        return await _http(self, request)

    def info(self) -> dict:
        """The model's metadata, this replica's pid and Ray node id, library digest and
        counts of requests and runs (for tests, tools)."""
        return {"metadata": protocol.model_metadata(self.model), "pid": os.getpid(),
                # outside a replica (tests calling the class) asking would start Ray
                "node": ray.get_runtime_context().get_node_id() if ray.is_initialized()
                else None,
                "digest": self.digest, **self.stats,
                "batch": None if self.batch is None else self.batch.limit}

    async def handle(self, method: str, path: str, headers: Mapping[str, Any],
                     body: bytes) -> tuple[int, dict, bytes]:
        """Answer one protocol request: ``(status, headers, body)``; never raises."""
        try:
            r = protocol.route(method, path)
            answer = _server_route(r)
            if answer is not None:
                return answer
            if r.model != self.model.name or r.version not in (None, self.model.version):
                version = f" version {r.version!r}" if r.version else ""
                raise RequestError(f"unknown model {r.model!r}{version}: this server has "
                                   f"{self.model.name!r} version {self.model.version}", 404)
            if r.kind == "model":
                return 200, dict(_JSON), self._metadata
            if r.kind == "model_ready":
                return 200, {}, b""
            req = protocol.parse_infer_request(self.model, body,
                                               headers.get(protocol.HEADER_LENGTH),
                                               self.max_body_bytes)
            outs = await self._infer_batch(req.inputs)
            if isinstance(outs, Exception):
                raise outs
            payload, hdrs = protocol.encode_infer_response(self.model, req, outs)
            return 200, hdrs, payload
        except RequestError as exc:
            return _error(exc, exc.status)
        except InputError as exc:  # a check the protocol left to the runtime
            return _error(exc, 400)
        except MonolibError as exc:  # ExecutionError and the like: the model failed
            return _error(exc, 500)
        except Exception as exc:  # a replica never dies of a request
            logger.exception("model %r: request failed", self.model.name)
            return _error(RuntimeError(f"model {self.model.name!r}: internal error: {exc}"),
                          500)


@serve.deployment
class Router:
    """The ingress of a multi-model application: answers the server routes and forwards
    each model's requests to its :class:`ModelServer` deployment (503 when that one is
    overloaded).

    Parameters
    ----------
    names : list of str
        Model names, in the order of ``handles``.
    *handles : DeploymentHandle
        The models' deployments.
    max_body_bytes : int
        Larger request bodies get 413.
    """

    def __init__(self, names: list[str], *handles: Any,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.models = dict(zip(names, handles))
        self.max_body_bytes = max_body_bytes

    async def __call__(self, request: Request) -> Response:
        """HTTP entry of the application."""
        return await _http(self, request)

    async def handle(self, method: str, path: str, headers: Mapping[str, Any],
                     body: bytes) -> tuple[int, dict, bytes]:
        """Answer or forward one protocol request: ``(status, headers, body)``."""
        try:
            r = protocol.route(method, path)
            answer = _server_route(r)
            if answer is not None:
                return answer
            handle = self.models.get(r.model)
            if handle is None:
                raise RequestError(f"unknown model {r.model!r}: this server has "
                                   f"{', '.join(map(repr, self.models))}", 404)
            return await handle.handle.remote(method, path, dict(headers), body)
        except RequestError as exc:
            return _error(exc, exc.status)
        except BackPressureError as exc:
            return _error(RuntimeError(f"overloaded, retry later ({exc})"), 503)
        except Exception as exc:  # noqa: BLE001 (a replica lost mid-request: answer, never hang)
            logger.warning("router: %s %s failed: %s", method, path, exc)
            return _error(RuntimeError(f"model replica failed: {exc}"), 503)


def deployment(path_or_paths: Any, *, replicas: int = 1, threads: int = 1,
               max_batch: int | None = None, batch_wait_ms: float = 5.0,
               trusted_keys: Sequence[Any] | None = None, backend: str = "monolib",
               name: str | None = None, max_ongoing_requests: int | None = None,
               max_queued_requests: int = 128, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               num_cpus: float | None = None) -> Any:
    """The Ray Serve application serving one or more libraries (Open Inference Protocol v2).

    Parameters
    ----------
    path_or_paths : str, os.PathLike, sequence or mapping
        A library, ``"name=path"`` strings, or ``{name: path}``; a bare path's model
        name is its file stem. Every node must reach the path (the same absolute
        path, e.g. shared storage), or have the file in its working directory (Ray's
        ``runtime_env={"working_dir": DIR}``: looked up there by file name).
    replicas : int
        Replicas per model (each a Ray actor loading the library once).
    threads : int
        Threads per replica (the library's own pool; also its ``num_cpus`` for Ray's
        placement unless ``num_cpus`` is given).
    max_batch : int, optional
        Rows per run at most (default: the run-time batch dim's upper bound; 1: no
        batching).
    batch_wait_ms : float
        How long a batch waits for more requests.
    trusted_keys : sequence, optional
        Public keys (paths or bytes): each replica verifies the library's signature
        before loading it.
    backend : str
        ``"monolib"``, or ``"onnxruntime"`` to serve ``.onnx`` files the same way (the
        baseline of ``bench/serve.py``).
    name : str, optional
        The model's name, for a single path.
    max_ongoing_requests : int, optional
        Requests one replica holds at once (default ``max(16, 2 * batch bound)``).
    max_queued_requests : int
        Requests a deployment queues beyond that; more get 503.
    max_body_bytes : int
        Request bodies above this get 413.
    num_cpus : float, optional
        CPUs Ray reserves per replica (default ``threads``).

    Returns
    -------
    ray.serve.Application
        Give it to ``serve.run`` or :func:`monolib.serve.run`; deploying it again under
        the same name after a library changed rolls out new replicas (the file's
        SHA-256 is part of the deployment) in Ray Serve's rolling update: an old
        replica finishes its requests before it stops, and requests arriving
        meanwhile wait in the proxy's queue. (Ray 2.60's ``max_surge_percent``, which
        would start new replicas first, asks them for 1 CPU whatever ``num_cpus``
        says: not used.)
    """
    models = model_paths(path_or_paths, name)
    keys = [k if isinstance(k, bytes) else Path(k).read_bytes() for k in trusted_keys or ()]
    bound = []
    for n, p in models.items():
        limit = max_batch if max_batch else 8
        opts = ModelServer.options(
            name=f"model-{n}", num_replicas=replicas,
            ray_actor_options={"num_cpus": threads if num_cpus is None else num_cpus},
            max_ongoing_requests=max_ongoing_requests or max(16, 2 * limit),
            max_queued_requests=max_queued_requests,
        )
        bound.append(opts.bind(n, p, backend=backend, threads=threads, max_batch=max_batch,
                               batch_wait_ms=batch_wait_ms, trusted_keys=keys or None,
                               digest=file_digest(p), max_body_bytes=max_body_bytes))
    if len(bound) == 1:
        return bound[0]
    # the router only forwards: the models' bounds are the ones that hold (503 with the
    # protocol's error body from the router when a model's queue is full)
    router = Router.options(name="router", ray_actor_options={"num_cpus": 0},
                            max_ongoing_requests=ROUTER_MAX_ONGOING,
                            max_queued_requests=max(128, max_queued_requests))
    return router.bind(list(models), *bound, max_body_bytes=max_body_bytes)
