"""`oc-repl bench`: tasks × protocols × attempts as separate trials, their records, pass@k and the reports."""
