"""Selection by measurement (issue 14): per conv signature, time the candidate
algorithms at compile time and cache the fastest per CPU.

* :mod:`.select`: candidates and the choice at emit time (emitters call ``choose``);
* :mod:`.cache`: the JSON cache under ``~/.cache/monolib/tuning`` keyed by CPU and a hash
  of the kernel sources;
* :mod:`.measure`: the micro-benchmark (one small library per signature, every candidate
  in it, medians at 1 thread);
* :mod:`.tuner`: ``compile(..., tune=True)``'s loop.
"""

from .select import Candidate, Selection, choose, selecting

__all__ = ["Candidate", "Selection", "choose", "selecting"]
