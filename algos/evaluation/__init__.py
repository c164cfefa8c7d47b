"""How good it is: evaluation runs and reports, training metrics, experiment trackers, plots.

Modules, lowest first; each imports only modules listed before it: ``memory`` (``perf/*`` probes), ``trackers``
(the ``report_to`` registry), ``run_log`` (metrics.jsonl, MetricsLogger), ``metrics`` (rollout aggregates),
``report`` (EvalReport), ``evaluate``, ``plot``, ``kl`` (KL of an adapter to its base, for forgetting).
"""
