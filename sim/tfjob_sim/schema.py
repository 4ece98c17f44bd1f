"""CRD structural schemas as kube-apiserver applies them: CRD validation, pruning, defaulting,
custom-resource validation (OpenAPI v3 + ``x-kubernetes-validations`` CEL).

Why this exists: users meet these rules through ``kubectl apply`` errors, and clients depend on
pruning and defaulting; the simulator must produce the *same* Status causes as a real server. The
message forms are taken from the real code paths (kube-openapi ``validate`` → apiextensions
``kubeOpenAPIResultToFieldErrors``; apiextensions CEL validator; apimachinery ``field.Error``):

- schema errors: ``spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"``;
  ``Required value``; ``Unsupported value: "x": supported values: "a", "b"``; ``Too long: may not be
  more than 2 bytes``; ``Too many: 3: must have at most 2 items``; errors that kube-openapi reports
  without a path (anyOf/allOf summaries, 1.36+ int32 range checks) carry the field ``<nil>``.
- CEL errors use CEL field paths (``spec.tfReplicaSpecs[Worker]`` for map entries, ``[i]`` for items);
  a failed rule says ``Invalid value: "object": <message or "failed rule: <rule>">`` up to 1.34 and
  omits object/array values (shows scalar values) from 1.35 — see ``server_minor``.
- an error of type Required/NotSupported/TooLong/TooMany/TypeInvalid blocks CEL and adds
  ``<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; ...``.
- CRD errors follow the internal-API field names (``spec.validation.openAPIV3Schema...`` when every
  version has the same schema, ``additionalPrinterColumns[0].JSONPath``) as the real server reports.

Causes are dicts ``{"reason", "message", "field"}`` (``field`` omitted when empty), ready for
:func:`tfjob_sim.errors.invalid`. Everything here is pure: no I/O, no clocks, no asyncio.

The three validators live in their own modules; this one names what callers use:

- :mod:`tfjob_sim.schema_values`: one value against one schema node (kube-openapi's validator);
- :mod:`tfjob_sim.schema_structural`: :class:`StructuralSchema`, pruning, defaulting, CEL rules, ratcheting;
- :mod:`tfjob_sim.schema_crd`: :func:`validate_crd`, the checks of a CRD definition;
- shared by them: :mod:`tfjob_sim.schema_errors` (``field.Error``) and :mod:`tfjob_sim.schema_formats`.
"""

from __future__ import annotations

from tfjob_sim.schema_crd import validate_crd, validate_crd_errors
from tfjob_sim.schema_errors import DEFAULT_SERVER_MINOR, FieldError
from tfjob_sim.schema_structural import StructuralSchema

__all__ = [
    "DEFAULT_SERVER_MINOR",
    "FieldError",
    "StructuralSchema",
    "validate_crd",
    "validate_crd_errors",
]
