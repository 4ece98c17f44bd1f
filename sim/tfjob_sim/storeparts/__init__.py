"""The parts the simulator's store (:class:`tfjob_sim.store.Store`) is built from, one concern a module.

From the bottom up: ``values`` (options, results, events, shared helpers), ``revisions`` (buckets,
the resourceVersion counter, type lookup), ``feed`` (commits, history, subscribers), ``reads`` (get and
list), ``admission`` (checks and validation), ``ownership`` (managedFields), ``crds`` (serving custom
resources), ``creation``, ``updates`` (PUT, /status, /scale; ``scale`` maps Scales), ``patching``,
``deletion`` (with ``cascades``: namespace and CRD cleanup) and ``pods`` (eviction, binding). Each
part is a class that builds on the parts it uses; :mod:`tfjob_sim.store` puts them together.
"""
