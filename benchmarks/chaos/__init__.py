"""The chaos soak's engine and invariant checker: ``benchmarks/soak.py`` runs it for as long as you like, the
test suite for three minutes (tests/soak/test_soak.py)."""
