"""Any JSON value, for the hostile-input property tests of the TFJob domain (hypothesis strategies).

Biased towards the shapes a TFJob, a pod or a service has (replica types, restart policies, condition
strings, timestamps), with unicode, big numbers, NaN and infinities: what an object stored past the
CRD's rules, or decoded from a misbehaving server, can hold in any field.
"""

from __future__ import annotations

from hypothesis import strategies as st

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            "Worker",
            "worker",
            "PS",
            "Chief",
            "Master",
            "Evaluator",
            "Never",
            "OnFailure",
            "Always",
            "ExitCode",
            "AllWorkers",
            "True",
            "False",
            "tensorflow",
            "Running",
            "Failed",
            "Succeeded",
            "2024-01-01T00:00:00Z",
            "not-a-time",
            "\u0000",
            "ワーカー",
            "\U0001f680" * 40,
        ]
    ),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=25,
)
