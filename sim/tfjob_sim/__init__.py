"""A simulated Kubernetes cluster that real clients cannot tell from a real one.

No kube-apiserver can be installed where this project is built and tested, so every test,
benchmark and the demo run against this package instead: an aiohttp API server with in-memory
storage and real resourceVersion/watch/list/write semantics, a KWOK-style scheduler and kubelet
driven by pod annotations, a garbage collector, and fault injection. Its fidelity caps the trust
in every other test, so where a choice exists it behaves like kube-apiserver, not like a mock.
"""

import importlib

# What the ``[sim]`` extra installs: a CEL engine (cel-python, module ``celpy``) for CRD
# x-kubernetes-validations, and RE2 (google-re2, module ``re2``) for schema patterns and CEL matches().
EXTRA_MODULES = ("re2", "celpy")
# Also in the extra, needed by the secure mode only: X.509 and ECDSA (cryptography).
SECURE_EXTRA_MODULES = ("cryptography",)


class MissingExtra(RuntimeError):
    """The simulator's optional dependencies are not installed."""


def require_extra(secure: bool = False) -> None:
    """Fail at once, in one line, when the ``[sim]`` extra is missing, instead of at the first CRD
    write with a 500 (``secure``: also what the secure mode needs)."""
    for name in EXTRA_MODULES + (SECURE_EXTRA_MODULES if secure else ()):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise MissingExtra(
                f"the simulated cluster needs the [sim] extra (cannot import {name}: {exc}); "
                "install it from a checkout with: pip install -e '.[sim]'"
            ) from None
