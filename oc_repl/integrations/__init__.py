"""oc-repl inside other harnesses. Each module imports its harness only when used (see oc_repl/harbor.py)."""
