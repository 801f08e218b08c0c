// The paged decode op's stream path (templates/paged/paged_stream_params.cuh), for the generated
// stub (compiler/codegen/emit_paged.cpp).
#pragma once
#include "paged/paged_stream.cuh"
#include "paged/paged_stream_hint.cuh"
#include "paged/paged_stream_prepare.cuh"
#include "paged/paged_stream_select.cuh"
