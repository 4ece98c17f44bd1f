"""The simulated kube-apiserver's routes and handlers, one module per kind of request.

:class:`tfjob_sim.server.SimServer` runs the request pipeline (authentication, API Priority and Fairness,
fault injection, the request log) and hands each request to :mod:`tfjob_sim.apiserver.routes`, the route
table, which names the handler:

- :mod:`tfjob_sim.apiserver.objects`: get, list, create, update, delete, deletecollection;
- :mod:`tfjob_sim.apiserver.watch`: watch streams;
- :mod:`tfjob_sim.apiserver.patch`: JSON, merge and strategic merge patches, server-side apply;
- :mod:`tfjob_sim.apiserver.subresources`: pod log, eviction, binding, scale, token and access reviews;
- :mod:`tfjob_sim.apiserver.discovery`: ``/api``, ``/apis``, ``/openapi/v3``;
- :mod:`tfjob_sim.apiserver.health`: ``/healthz``, ``/livez``, ``/readyz``, ``/metrics``, ``/version``;
- :mod:`tfjob_sim.apiserver.control`: the simulator's own ``/_sim/`` API;
- :mod:`tfjob_sim.apiserver.common`: what they share (path parsing, negotiation, bodies, responses).
"""
