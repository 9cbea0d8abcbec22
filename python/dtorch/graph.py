"""``dtorch.graph``: graphs (one controller thread and its workers) under the original DTorch's path.

>>> from dtorch.graph import Graph, GraphOption
>>> g = Graph(GraphOption(per_device_per_process=False))
>>> g.sync_future().get()
"""

from ._graph import Graph, GraphOption, VoidFutureCollect, default_graph

__all__ = ["Graph", "GraphOption", "VoidFutureCollect", "default_graph"]
