"""The host side of oc-repl's docker plumbing: a small program run as root on the docker daemon's host
(`python -m oc_repl.hostns`), which reaches a container's processes and files by joining its namespaces itself, so
that nothing the container holds (its shell, its tools, what the agent put on its PATH) runs any of it.

It seals the verifier (seal.py), and reads the container's files, lists its processes and ends them (ops.py). The
client starts it for one request at a time (oc_repl/sandbox/docker_host.py); it imports the standard library only.
"""
