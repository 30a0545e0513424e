"""The cluster: where distributed policies run (``clusters``: fragnb's own LocalCluster, Dask-CUDA,
or a scheduler's address), what answers at an address before a client waits on it (``probe``), and
Dask's statistical profiler paused while replicas run (``dask_profiler``)."""
