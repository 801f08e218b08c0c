// Only in the static build of libwinnow_llvm.so (WINNOW_LLVM_STATIC), and only where LLVM
// ships no static Polly (cmake/llvm_backend.cmake): Debian's clang 19 is built with Polly
// linked into its tools, so libclangCodeGen.a refers to the plugin's entry. clang asks for it
// only with -polly options, which winnow never passes; this entry registers nothing.
#include <llvm/Passes/PassPlugin.h>

llvm::PassPluginLibraryInfo getPollyPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "winnow-no-polly", "0", [](llvm::PassBuilder&) {}};
}
