"""Which Kubernetes minor version the simulated API server behaves as, and what that changes.

Why: a CRD is refused by an API server older than its newest validation feature, and users need to know the oldest
Kubernetes the TFJob CRD installs on. ``tfjob-controller sim --kubernetes-version 1.N`` (``StoreConfig.kubernetes_minor``)
makes ``/version`` say 1.N and the CRD checks accept or refuse the features of ``x-kubernetes-validations`` as
kube-apiserver 1.N does. Each feature below is given with the release that serves it by default and where that fact
comes from (the Kubernetes release notes and the apiextensions-apiserver feature gates):

- ``x-kubernetes-validations`` (CEL rules on CRD schemas): beta and on by default since 1.25 (feature gate
  CustomResourceValidationExpressions), GA in 1.29.
- a rule's ``messageExpression``: added in 1.27.
- a rule's ``reason`` and ``fieldPath``: added in 1.28.
- a rule's ``optionalOldSelf``: added in 1.29 behind the alpha feature gate CRDValidationRatcheting (off by default),
  beta and on by default from 1.30, GA in 1.33. With the gate off, kube-apiserver drops the field from every rule of a
  CRD it is given (``dropOptionalOldSelfField`` in the CRD registry strategy), so ``oldSelf`` is a plain value, not a
  CEL ``optional``, and a rule calling ``oldSelf.hasValue()``, ``oldSelf.value()`` or ``oldSelf.orValue(...)`` fails
  to compile: ``found no matching overload for 'hasValue' applied to '<type>.()'``.

The simulator models 1.29 to 1.35 (it reproduces the message changes of 1.34 and 1.35 elsewhere); older releases
differ in more than the CRD features above and are refused by the flag.
"""

from __future__ import annotations

DEFAULT_MINOR = 33
OLDEST_MINOR = 29
NEWEST_MINOR = 35
# The first minor whose kube-apiserver keeps a rule's optionalOldSelf by default.
OPTIONAL_OLD_SELF_MINOR = 30


def parse_kubernetes_version(text: str) -> int:
    """The minor of ``1.N`` (or ``v1.N``, ``1.N.P``); ValueError with a one-line reason for anything else, or a
    minor the simulator does not model."""
    parts = text.strip().removeprefix("v").split(".")
    if len(parts) not in (2, 3) or parts[0] != "1" or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"expected a Kubernetes version like 1.33, got {text!r}")
    minor = int(parts[1])
    if not OLDEST_MINOR <= minor <= NEWEST_MINOR:
        raise ValueError(f"the simulator behaves as Kubernetes 1.{OLDEST_MINOR} to 1.{NEWEST_MINOR}, not {text}")
    return minor


def keeps_optional_old_self(minor: int) -> bool:
    """Whether kube-apiserver 1.``minor`` keeps (and honours) a rule's ``optionalOldSelf`` by default."""
    return minor >= OPTIONAL_OLD_SELF_MINOR
