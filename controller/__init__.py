"""tfjob-controller: a Kubernetes controller for Kubeflow's TFJob (kubeflow.org/v1).

Layers, from the bottom up:

- ``controller.runtime``: generic controller machinery (API client, informers, work queue,
  runner, leader election). It knows nothing of TFJobs.
- ``controller.tfjob``: the TFJob domain. The decision is a pure function of
  (job, pods, services, now); a thin executor applies its actions. It knows nothing of HTTP.
- ``tfjob_sim``: a simulated Kubernetes cluster (API server, scheduler/kubelet, garbage
  collector, fault injection) used by tests, benchmarks and the demo. Production never uses it.
- ``controller.ops``: the edge: metrics and health endpoints, logging, the command line.
"""

__version__ = "0.1.0"
