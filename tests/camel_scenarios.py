"""The tool-call scenarios of the camel differential test (tests/protocols/camel/test_camel_exact.py)."""

from __future__ import annotations

from typing import Any

# Each scenario: (name, calls, the image's WORKDIR or None). A blocking `sleep` between calls lets time pass on both
# sides alike.
SCENARIOS: list[tuple[str, list[tuple[str, dict[str, Any]]], str | None]] = [
    ("blocking output", [("shell_exec", {"id": "a", "command": "echo hello; printf 'two\\nlines\\n'"})], None),
    (
        "no output, blanks, escapes alone",
        [
            ("shell_exec", {"id": "a", "command": "true"}),
            ("shell_exec", {"id": "a", "command": "printf '  \\n\\t'"}),
            ("shell_exec", {"id": "a", "command": "printf '\\033[0m'"}),
        ],
        None,
    ),
    ("stderr and a non-zero exit", [("shell_exec", {"id": "a", "command": "echo oops >&2; exit 3"})], None),
    (
        "exit status never shown",
        [("shell_exec", {"id": "a", "command": "exit 4"}), ("shell_exec", {"id": "a", "command": "ls /nowhere"})],
        None,
    ),
    (
        "cd and export do not carry over",
        [
            ("shell_exec", {"id": "a", "command": "cd /tmp && export X=1 && pwd && echo x$X"}),
            ("shell_exec", {"id": "a", "command": "pwd; echo x$X; echo $TERM; tty || true"}),
        ],
        None,
    ),
    (
        "ANSI, carriage returns, invalid UTF-8",
        [
            (
                "shell_exec",
                {"id": "a", "command": "printf 'a\\r\\nb\\r\\n10%%\\r100%%\\n\\033[31mred\\033[0m\\n\\n\\n'"},
            ),
            ("shell_exec", {"id": "a", "command": "printf 'caf\\303\\251 bad:\\377\\376 end\\n'"}),
        ],
        None,
    ),
    (
        "timeout, then shell_view until completed",
        [
            ("shell_exec", {"id": "t", "command": "echo start; sleep 3; echo done", "timeout": 1}),
            ("shell_view", {"id": "t"}),
            ("shell_exec", {"id": "w", "command": "sleep 4"}),
            ("shell_view", {"id": "t"}),
            ("shell_view", {"id": "t"}),
        ],
        None,
    ),
    (
        "silent timed-out command, fractional and zero timeouts",
        [
            ("shell_exec", {"id": "q", "command": "sleep 2", "timeout": 1.5}),
            ("shell_exec", {"id": "w", "command": "sleep 3"}),
            ("shell_view", {"id": "q"}),
            ("shell_exec", {"id": "z", "command": "sleep 2", "timeout": 0}),
        ],
        None,
    ),
    (
        "input to a timed-out blocking command",
        [
            ("shell_exec", {"id": "t", "command": "sleep 6", "timeout": 1}),
            ("shell_write_to_process", {"id": "t", "command": "hello"}),
            ("shell_exec", {"id": "t", "command": "echo reuse", "block": False}),
        ],
        None,
    ),
    (
        "python REPL session",
        [
            ("shell_exec", {"id": "py", "command": "python3", "block": False}),
            ("shell_write_to_process", {"id": "py", "command": "print(6*7)"}),
            ("shell_exec", {"id": "py", "command": "python3", "block": False}),
            ("shell_write_to_process", {"id": "py", "command": "exit()"}),
            ("shell_view", {"id": "py"}),
            ("shell_write_to_process", {"id": "py", "command": "1"}),
        ],
        None,
    ),
    (
        "cat session",
        [
            ("shell_exec", {"id": "c", "command": "cat", "block": False}),
            ("shell_write_to_process", {"id": "c", "command": "hello"}),
            ("shell_view", {"id": "c"}),
            ("shell_write_to_process", {"id": "c", "command": 5}),
        ],
        None,
    ),
    (
        "block null, then the session's end",
        [
            ("shell_exec", {"id": "n", "command": "echo reused", "block": None}),
            ("shell_exec", {"id": "w", "command": "sleep 2"}),
            ("shell_view", {"id": "n"}),
            ("shell_view", {"id": "n"}),
            ("shell_write_to_process", {"id": "n", "command": "x"}),
        ],
        None,
    ),
    (
        "a shell session",
        [
            ("shell_exec", {"id": "sh", "command": "bash --norc", "block": False}),
            ("shell_write_to_process", {"id": "sh", "command": "echo $TERM $PYTHONUNBUFFERED; pwd"}),
        ],
        None,
    ),
    (
        "unknown ids and a running id",
        [
            ("shell_view", {"id": "nope"}),
            ("shell_write_to_process", {"id": "nope", "command": "x"}),
            ("shell_exec", {"id": "s", "command": "sleep 30", "block": False}),
            ("shell_exec", {"id": "s", "command": "sleep 30", "block": False}),
        ],
        None,
    ),
    (
        "nested, relative and absolute file writes",
        [
            ("shell_write_content_to_file", {"content": "print('hi')\n", "file_path": "rel/dir/x.py"}),
            ("shell_write_content_to_file", {"content": "plain", "file_path": "plain.txt"}),
            ("shell_write_content_to_file", {"content": "é\n", "file_path": "/workspace/sub/deep/f.txt"}),
            ("shell_write_content_to_file", {"content": "new", "file_path": "/workspace/sub/deep/f.txt"}),
            ("shell_exec", {"id": "a", "command": "cat /rel/dir/x.py /plain.txt /workspace/sub/deep/f.txt"}),
        ],
        None,
    ),
    (
        "a directory as the target, in an image with a WORKDIR",
        [
            ("shell_write_content_to_file", {"content": "x", "file_path": "/workspace"}),
            ("shell_write_content_to_file", {"content": "y", "file_path": "top.txt"}),
            ("shell_write_content_to_file", {"content": "z", "file_path": "/app/in-app.txt"}),
            ("shell_exec", {"id": "a", "command": "ls /workspace; cat /top.txt /app/in-app.txt; pwd"}),
        ],
        "/app",
    ),
    (
        "writes docker cp refuses, in an image with a WORKDIR",
        [
            ("shell_write_content_to_file", {"content": "x", "file_path": "/etc/passwd/x.txt"}),
            ("shell_write_content_to_file", {"content": "x", "file_path": "etc/passwd/x.txt"}),
            ("shell_write_content_to_file", {"content": "x", "file_path": "rel/x.txt"}),
            ("shell_write_content_to_file", {"content": "x", "file_path": "./a/../rel2//deep/x.txt"}),
            ("shell_write_content_to_file", {"content": "x", "file_path": "/etc/passwd/"}),
            ("shell_write_content_to_file", {"content": "x", "file_path": "made/"}),
            ("shell_exec", {"id": "a", "command": "head -1 /etc/passwd; ls /app; ls -d /rel /made 2>&1"}),
        ],
        "/app",
    ),
    (
        "missing and unexpected arguments",
        [
            ("shell_exec", {"id": "z"}),
            ("shell_exec", {}),
            ("shell_view", {}),
            ("shell_write_to_process", {"command": "x"}),
            ("shell_write_content_to_file", {"content": "x"}),
            ("shell_write_content_to_file", {}),
            ("shell_exec", {"id": "z", "command": "echo", "bogus": 1}),
        ],
        None,
    ),
    (
        "values of other JSON types",
        [
            ("shell_exec", {"id": "a", "command": 5}),
            ("shell_exec", {"id": "a", "command": None}),
            ("shell_exec", {"id": "a", "command": "echo ran", "block": "false"}),
            ("shell_exec", {"id": 5, "command": "sleep 30", "block": 0}),
            ("shell_view", {"id": "5"}),
            ("shell_view", {"id": None}),
            ("shell_view", {"id": ["a"]}),
            ("shell_write_content_to_file", {"content": 5, "file_path": "/f.txt"}),
            ("shell_write_content_to_file", {"content": "x", "file_path": 5}),
        ],
        None,
    ),
    (
        "timeouts of other JSON types",
        [
            ("shell_exec", {"id": "a", "command": "echo untracked", "timeout": "10"}),
            ("shell_exec", {"id": "b", "command": "sleep 3", "timeout": True}),
            ("shell_exec", {"id": "c", "command": "echo x", "timeout": None}),
        ],
        None,
    ),
    (
        "a NUL byte in a path",
        [
            ("shell_write_content_to_file", {"content": "x", "file_path": "/workspace/a\0b"}),
            ("shell_write_content_to_file", {"content": "x", "file_path": "d\0/x.txt"}),
            ("shell_exec", {"id": "a", "command": "test -e /workspace/a || echo no a; test -e /d || echo no d"}),
        ],
        None,
    ),
    ("the default timeout", [("shell_exec", {"id": "d", "command": "sleep 30"})], None),
    (
        "4000 lines of output",
        [("shell_exec", {"id": "a", "command": "for i in $(seq 4000); do echo line $i; done"})],
        None,
    ),
]

# A session that ends while its output is collected races on both sides of a comparison: whether the look that sees
# its last output also sees its end (then "output + SESSION TERMINATED") or an earlier one does (then the no-new-output
# marker until the deadline, and the warning). camel's answer depends on when its reader thread asked the daemon,
# oc-repl's on when its look came; a loaded machine shifts both. A scenario that differs is run again on both sides:
# the answers must agree in one of ATTEMPTS runs, so a difference that is not timing still fails every time.
ATTEMPTS = 3
