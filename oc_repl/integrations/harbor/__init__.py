"""oc-repl inside Harbor: the agent, its environment as a sandbox (with the shell scripts it runs there and the bridge
to Harbor's event loop), and what it records for Harbor."""
