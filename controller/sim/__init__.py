"""A simulated Kubernetes cluster that real clients cannot tell from a real one.

No kube-apiserver can be installed where this project is built and tested, so every test,
benchmark and the demo run against this package instead: an aiohttp API server with in-memory
storage and real resourceVersion/watch/list/write semantics, a KWOK-style scheduler and kubelet
driven by pod annotations, a garbage collector, and fault injection. Its fidelity caps the trust
in every other test, so where a choice exists it behaves like kube-apiserver, not like a mock.
"""
