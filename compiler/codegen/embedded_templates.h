// The templates/*/*.cuh files, embedded into the library at build time
// (cmake/embed_files.cmake) and handed to the backend from memory.
#pragma once
#include <cstddef>
#include <span>

namespace winnow::codegen {

struct EmbeddedTemplate {
  const char* name;  // include name, "topk/topk_kernel.cuh"
  const char* text;
  std::size_t size;
};
std::span<const EmbeddedTemplate> embedded_templates();

}  // namespace winnow::codegen
