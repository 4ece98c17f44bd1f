"""The TFJob domain: defaulting, validation, TF_CONFIG, status rules and the reconcile decision.

The decision is a pure function of (job, its pods and services, now) returning actions and the
new status; the executor that applies the actions is thin. Nothing here speaks HTTP.
"""
