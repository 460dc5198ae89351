"""Maintainers' tools run with ``python -m``: programs that make the project's shipped files and are
never imported by a run (docs/architecture.md, "Layout and layering").

- :mod:`mcsa_bench.tools.generate_references`: the reference posteriors, by NumPyro's NUTS (the
  optional extra ``[reference]``; docs/references.md).
"""
