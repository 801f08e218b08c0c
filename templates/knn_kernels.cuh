// The retrieval mode's kernels, for the generated stub (compiler/codegen/emit_knn.cpp).
#pragma once
#include "winnow/knn_select.cuh"
#include "winnow/knn_stream.cuh"
