"""How good it is: evaluation runs and reports, training metrics, plots."""
