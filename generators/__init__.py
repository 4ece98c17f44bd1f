"""Build-time generators: files committed to the repository that are derived from data kept here.

Not part of the product (the controller's wheel and image carry only ``controller``): they run on a
developer's machine, and tests compare their output with the committed files.

- :mod:`generators.catalogue`: every metric family the controller exports, as data.
- :mod:`generators.monitoring`: the Grafana dashboards, the alerting rules and their unit tests, the
  Prometheus Operator manifests and ``docs/metrics.md``, from the catalogue
  (``python -m generators.monitoring``; ``--check`` only compares).
"""
