"""Tasks: terminal-bench task directories and the verifiers that judge a run."""
