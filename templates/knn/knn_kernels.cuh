// The retrieval mode's kernels, for the generated stub (compiler/codegen/emit_knn.cpp).
#pragma once
#include "knn/knn_select.cuh"
#include "knn/knn_stream.cuh"
