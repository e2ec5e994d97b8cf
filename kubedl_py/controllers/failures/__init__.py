"""Failure handling, in one package: what happened to a job and what to do about it.

``handling.FailureHandling`` is the entry point the reconcile calls; the rules it applies are its siblings:
``classes`` (a failure's class: user or infrastructure), ``policies`` (the job's policies: completion, restart
scope, cleanup after failure, why a pod waits), ``recovery`` (the evidence in status, the budgets, lost nodes,
hangs). docs/policies.md is the user's side of it.
"""
