"""The reconcile decision of one TFJob, one module per feature it decides.

Why a package: :func:`controller.tfjob.decide.decide` is the orchestrator; each behaviour it applies
(cleanup and TTL, suspension, back-off limit and deadline, the PodGroup, replica restarts, services,
conditions) lives in the module named for it, as a function of the pass's immutable input
(:mod:`controller.tfjob.decision.inputs`) that returns what it decided.
"""
