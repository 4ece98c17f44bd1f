"""Build-time generators: files committed to the repository that are derived from data kept here.

Not part of the product (the controller's wheel and image carry only ``controller``): they run on a
developer's machine, and tests compare their output with the committed files.

- :mod:`generators.catalogue`: every metric family the controller exports, as data.
- :mod:`generators.dashboards`: the two Grafana dashboards as data (rows, panels, queries, units, thresholds);
  :mod:`generators.grafana` builds their JSON with the Grafana Foundation SDK's typed builders.
- :mod:`generators.alerts`: the alerting rules; :mod:`generators.manifests`: the Prometheus Operator manifests;
  :mod:`generators.metrics_doc`: ``docs/metrics.md``; :mod:`generators.promql`: the scoping both dashboards and
  rules follow, and which metrics an expression reads.
- :mod:`generators.monitoring`: writes all of those files (``python -m generators.monitoring``; ``--check`` only
  compares).
"""
