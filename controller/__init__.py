"""tfjob-controller: a Kubernetes controller for Kubeflow's TFJob (kubeflow.org/v1).

Layers, from the bottom up:

- ``controller.runtime``: generic controller machinery (API client, informers, work queue,
  runner, leader election). It knows nothing of TFJobs.
- ``controller.tfjob``: the TFJob domain. The decision is a pure function of
  (job, pods, services, now); a thin executor applies its actions. It knows nothing of HTTP.
- ``controller.ops``: the edge: metrics and health endpoints, logging.
- ``controller.app`` composes ``tfjob-controller run``; ``controller.cli`` is the command line.

The simulated Kubernetes cluster used by tests, benchmarks, ``tfjob-controller sim`` and ``demo`` is not
part of this package: it is ``tfjob_sim``, its own distribution (``sim/``, the ``[sim]`` extra).
Production never uses it.
"""

__version__ = "0.1.0"
