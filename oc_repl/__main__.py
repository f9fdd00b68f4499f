from oc_repl.cli import main

main()
