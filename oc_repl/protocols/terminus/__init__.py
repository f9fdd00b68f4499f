"""terminus-json and terminus-xml: terminal-bench's Terminus-2 agent, and everything only it uses: the reply
parsers, the terminals it types into (tmux, or a pty emulated on the client), keystrokes, and the sync of its upstream
texts."""
