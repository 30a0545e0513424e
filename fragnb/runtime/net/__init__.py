"""The network: values from one replica straight to another (``channels``: ZeroMQ between workers,
queues between threads) and the gradient all-reduce of a process group (``collectives``). Imports
nothing else of fragnb's runtime."""
