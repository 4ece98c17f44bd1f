"""The edge of the program: Prometheus metrics and health endpoints, logging, the command line."""
