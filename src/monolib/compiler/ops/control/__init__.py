"""control-flow operators (issue 13): ``If`` on a run-time condition, ``Loop``,
``Scan``; their subgraphs compiled into the same library by :mod:`.subgraph` (the
reusable part: other ops holding a subgraph build on it), run-time failures reported
through :mod:`.status`."""

from .._discover import import_all

MODULES = import_all(__name__, __path__)  # registration side effects

__all__: list[str] = []
