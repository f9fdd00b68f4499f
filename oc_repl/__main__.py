"""The `oc-repl` command (and `python -m oc_repl`)."""

from oc_repl import startup


def main() -> None:
    startup.pause()  # before the command line's imports, which make what the process keeps
    from oc_repl.cli import main as command

    try:
        command()
    finally:
        startup.ending()


if __name__ == "__main__":
    main()
