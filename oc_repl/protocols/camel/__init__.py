"""camel-terminal-toolkit: the protocol the checkpoint was trained with (camel's TerminalToolkit), and everything only
it uses: its tools, their arguments and calls, file writes, terminal text, and the sync of its upstream texts."""
