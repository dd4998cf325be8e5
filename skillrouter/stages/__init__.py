"""What each stage builds: one module per concept (data, retrieval, training, reranking, synthesis),
each stage declared as a :class:`~skillrouter.stages.graph.Stage` with its params, inputs, resource
class and build function. Nothing here decides where or when a stage runs (that is ``pipeline/``)."""
