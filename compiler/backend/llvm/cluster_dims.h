// Thread-block cluster shapes for the llvm backend. clang 19 ignores __cluster_dims__, so
// templates/ptx/cluster.cuh redefines it, under clang, as a function annotation
// ("winnow.cluster_dims X Y Z"); these read it from the module and write it into the
// entry's PTX as NVRTC's cubins carry it (.explicitcluster, .reqnctapercluster), so that an
// ordinary launch runs the kernel in clusters. Part of libwinnow_llvm.so only.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace llvm {
class Module;
}  // namespace llvm

namespace winnow::backend::llvm_be {

struct ClusterDims {
  std::string entry;  // the kernel's (unmangled, extern "C") name
  std::array<unsigned, 3> dims{};
};

// Every "winnow.cluster_dims X Y Z" annotation of a function of the module (read before
// the optimiser may drop llvm.global.annotations). Throws CompileError on a malformed one.
std::vector<ClusterDims> read_cluster_dims(const llvm::Module& m);

// The PTX with each entry's cluster directives after its parameter list. Throws
// CompileError when an entry is not in the PTX.
std::string add_cluster_directives(std::string ptx, const std::vector<ClusterDims>& clusters);

}  // namespace winnow::backend::llvm_be
