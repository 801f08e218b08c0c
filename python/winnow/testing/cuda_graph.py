"""CUDA-graph capture for the tests: an op warmed up off the default stream, as torch asks,
then captured once, to be replayed with new contents in the same tensors."""
import torch


def capture(call):
    """(graph, output): call() run once on a side stream, then captured into a CUDAGraph;
    output is the captured call's result, rewritten by every graph.replay()."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = call()
    return graph, output
