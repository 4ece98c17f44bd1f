"""The process runtime: every container of every pod is a real process on this machine, each pod in its
own network namespace with its own IP, and cluster DNS answering Services (opt-in; needs root)."""
