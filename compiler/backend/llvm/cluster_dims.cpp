// Cluster shapes from clang's function annotations into the entry's PTX (cluster_dims.h).
#include "compiler/backend/llvm/cluster_dims.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/Module.h>

#include <sstream>

#include "compiler/backend/backend.h"

namespace winnow::backend::llvm_be {
namespace {

constexpr const char* kPrefix = "winnow.cluster_dims ";

[[noreturn]] void fail(const std::string& what) {
  throw CompileError("llvm backend: " + what, "", "");
}

// The string a global of the annotation points at (a constant C string).
std::string c_string(const llvm::Value* v) {
  const auto* g = llvm::dyn_cast<llvm::GlobalVariable>(v->stripPointerCasts());
  if (!g || !g->hasInitializer()) return "";
  const auto* data = llvm::dyn_cast<llvm::ConstantDataSequential>(g->getInitializer());
  if (!data || !data->isCString()) return "";
  return data->getAsCString().str();
}

}  // namespace

std::vector<ClusterDims> read_cluster_dims(const llvm::Module& m) {
  std::vector<ClusterDims> out;
  const llvm::GlobalVariable* annotations = m.getGlobalVariable("llvm.global.annotations");
  if (!annotations || !annotations->hasInitializer()) return out;
  const auto* list = llvm::dyn_cast<llvm::ConstantArray>(annotations->getInitializer());
  if (!list) return out;
  for (const llvm::Use& u : list->operands()) {
    // { ptr function, ptr annotation, ptr file, i32 line, ptr arguments }
    const auto* entry = llvm::dyn_cast<llvm::ConstantStruct>(u.get());
    if (!entry || entry->getNumOperands() < 2) continue;
    const std::string text = c_string(entry->getOperand(1));
    if (text.rfind(kPrefix, 0) != 0) continue;
    const auto* fn = llvm::dyn_cast<llvm::Function>(entry->getOperand(0)->stripPointerCasts());
    if (!fn) fail("the annotation '" + text + "' is not on a function");
    ClusterDims c;
    c.entry = fn->getName().str();
    std::istringstream in(text.substr(std::string(kPrefix).size()));
    std::string rest;
    if (!(in >> c.dims[0] >> c.dims[1] >> c.dims[2]) || (in >> rest) || c.dims[0] == 0 ||
        c.dims[1] == 0 || c.dims[2] == 0)
      fail("the annotation '" + text + "' of " + c.entry + " is not three positive cluster sizes");
    out.push_back(std::move(c));
  }
  return out;
}

std::string add_cluster_directives(std::string ptx, const std::vector<ClusterDims>& clusters) {
  for (const ClusterDims& c : clusters) {
    const size_t at = ptx.find(".entry " + c.entry + "(");
    if (at == std::string::npos) fail("the cluster kernel " + c.entry + " is not an entry of the PTX");
    // The directives go between the parameter list's ')' and the body's '{' (beside
    // .maxntid and .minnctapersm).
    const size_t close = ptx.find(')', at), body = ptx.find("\n{", at);
    if (close == std::string::npos || body == std::string::npos || body < close)
      fail("the PTX entry " + c.entry + " has no body");
    ptx.insert(body + 1, ".explicitcluster\n.reqnctapercluster " + std::to_string(c.dims[0]) + ", " +
                             std::to_string(c.dims[1]) + ", " + std::to_string(c.dims[2]) + "\n");
  }
  return ptx;
}

}  // namespace winnow::backend::llvm_be
