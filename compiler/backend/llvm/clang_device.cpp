// CUDA source -> optimised nvptx64 LLVM module (clang as a library) -> PTX (NVPTX target).
// The clang driver, run in-process over an in-memory file system that holds the source and
// the headers, turns the usual command line into the device-side compiler invocation
// (CUDA headers from the toolkit, clang's CUDA wrappers, libdevice), as clang++ would.
#include "compiler/backend/llvm/clang_device.h"

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/Basic/Version.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Driver/Compilation.h>
#include <clang/Driver/Driver.h>
#include <clang/Driver/Job.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Lex/HeaderSearchOptions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <mutex>

#include "compiler/backend/dump_sources.h"
#include "compiler/backend/llvm/clang_headers.h"

#ifndef WINNOW_CLANG_EXECUTABLE
#error "WINNOW_CLANG_EXECUTABLE (the clang binary the driver is named after) must be defined"
#endif
#ifndef WINNOW_CUDA_PATH
#error "WINNOW_CUDA_PATH (the CUDA toolkit's root) must be defined"
#endif

namespace winnow::backend::llvm_be {
namespace {

// Where the in-memory files live: a folder no real file system has.
constexpr const char* kRoot = "/winnow-llvm-backend";

void init_nvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

// The source, the headers under include/, clang's CUDA headers as the resource folder
// (clang_headers.h: embedded, so clang's own folder need not exist where this runs), and an
// empty texture_fetch_functions.h: clang 19's CUDA wrapper includes it, CUDA 13 dropped it,
// and winnow uses no textures.
llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> file_system(const CompileRequest& req,
                                                            const std::string& source_path) {
  auto mem = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  mem->addFile(source_path, 0, llvm::MemoryBuffer::getMemBufferCopy(req.source, source_path));
  for (const auto& [name, text] : req.headers) {
    const std::string path = std::string(kRoot) + "/include/" + name;
    mem->addFile(path, 0, llvm::MemoryBuffer::getMemBufferCopy(text, path));
  }
  for (const auto& h : clang_cuda_headers()) {
    const std::string path = std::string(kRoot) + "/resource/include/" + h.name;
    mem->addFile(path, 0, llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(h.text, h.size), path));
  }
  mem->addFile(std::string(kRoot) + "/compat/texture_fetch_functions.h", 0,
               llvm::MemoryBuffer::getMemBufferCopy("// empty: see clang_device.cpp\n"));
  auto overlay = llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(llvm::vfs::getRealFileSystem());
  overlay->pushOverlay(mem);
  return overlay;
}

// The driver's builtin header folders (its resource folder's include/ and cuda_wrappers/;
// with Debian's clang, where that folder is absent, /usr/include/clang/<version>/include)
// become the embedded copy (file_system): the same headers on every machine, and none of
// clang's files needed where this runs. -resource-dir cannot do it: Debian's driver then
// takes its builtin headers from /usr/include/clang/<version>/include.
void use_embedded_resource_headers(clang::CompilerInvocation& invocation) {
  const std::string real = clang::driver::Driver::GetResourcesPath(WINNOW_CLANG_EXECUTABLE) + "/include";
  const std::string debian = "/usr/include/clang/" CLANG_VERSION_STRING "/include";
  const std::string embedded = std::string(kRoot) + "/resource/include";
  clang::HeaderSearchOptions& hs = invocation.getHeaderSearchOpts();
  for (clang::HeaderSearchOptions::Entry& e : hs.UserEntries) {
    std::string path = e.Path;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const bool below_real = path.rfind(real, 0) == 0 && (path.size() == real.size() || path[real.size()] == '/');
    if (path == debian) e.Path = embedded;
    else if (below_real) e.Path = embedded + path.substr(real.size());
  }
  hs.ResourceDir = std::string(kRoot) + "/resource";
}

// -mllvm options set LLVM's global flags, once per process as clang's own main does; every
// request passes the same ones (the command line above is fixed).
void apply_llvm_args(const std::vector<std::string>& llvm_args) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::vector<const char*> argv = {"winnow"};
    for (const std::string& a : llvm_args) argv.push_back(a.c_str());
    llvm::cl::ParseCommandLineOptions(static_cast<int>(argv.size()), argv.data());
  });
}

// clang 19 ignores __grid_constant__ ("unknown attribute"): a kernel parameter whose address
// is taken (the TMA map, handed to cp.async.bulk.tensor) would be copied to local memory,
// and TMA needs the parameter itself. winnow's kernels take every parameter const and by
// value, so every byval parameter of every kernel is marked grid_constant, which LLVM's
// NVPTX target honours (read in place, cvta.param), as NVRTC does for __grid_constant__.
void mark_grid_constant(llvm::Module& m) {
  llvm::NamedMDNode* annotations = m.getOrInsertNamedMetadata("nvvm.annotations");
  llvm::LLVMContext& ctx = m.getContext();
  std::vector<llvm::MDNode*> added;
  for (llvm::MDNode* node : annotations->operands()) {
    if (node->getNumOperands() < 2) continue;
    auto* kind = llvm::dyn_cast<llvm::MDString>(node->getOperand(1));
    auto* fn = llvm::mdconst::dyn_extract_or_null<llvm::Function>(node->getOperand(0));
    if (!kind || kind->getString() != "kernel" || !fn) continue;
    std::vector<llvm::Metadata*> indices;  // 1-based, as NVPTX reads them
    for (const llvm::Argument& a : fn->args())
      if (a.hasByValAttr())
        indices.push_back(llvm::ConstantAsMetadata::get(
            llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), a.getArgNo() + 1)));
    if (indices.empty()) continue;
    added.push_back(llvm::MDNode::get(
        ctx, {llvm::ValueAsMetadata::get(fn), llvm::MDString::get(ctx, "grid_constant"),
              llvm::MDNode::get(ctx, indices)}));
  }
  for (llvm::MDNode* n : added) annotations->addOperand(n);
}

}  // namespace

std::string clang_version() { return CLANG_VERSION_STRING; }

DeviceModule compile_to_module(const CompileRequest& req) {
  const std::string source_path = std::string(kRoot) + "/" + (req.source_name.empty() ? "source.cu" : req.source_name);
  auto vfs = file_system(req, source_path);

  std::string log;
  llvm::raw_string_ostream log_stream(log);
  auto diag_opts = llvm::makeIntrusiveRefCnt<clang::DiagnosticOptions>();
  diag_opts->ShowCarets = false;  // and below: see the invocation's options
  auto printer = std::make_unique<clang::TextDiagnosticPrinter>(log_stream, diag_opts.get());
  auto diag_ids = llvm::makeIntrusiveRefCnt<clang::DiagnosticIDs>();
  clang::DiagnosticsEngine diags(diag_ids, diag_opts, printer.get(), /*ShouldOwnClient=*/false);
  // The driver's own warnings (CUDA 13 newer than clang 19 knows: -Wno-unknown-cuda-version
  // reaches the compiler, not this engine) say nothing about the source.
  diags.setIgnoreAllWarnings(true);

  // clang++'s command line for one device-side compile; -ffp-contract=off as NVRTC's
  // --fmad=false: every mul and add stays exact (the generated code calls fmaf itself).
  const std::string arch = "--cuda-gpu-arch=" + req.arch.str();
  const std::string include = std::string("-I") + kRoot + "/include";
  const std::string compat = std::string("-I") + kRoot + "/compat";
  const std::string cuda_path = std::string("--cuda-path=") + WINNOW_CUDA_PATH;
  std::vector<const char*> args = {
      WINNOW_CLANG_EXECUTABLE, "-x", "cuda", "--cuda-device-only", arch.c_str(),
      cuda_path.c_str(), "-Wno-unknown-cuda-version", "-std=c++17", "-O3",
      "-ffp-contract=off", "-fno-exceptions", include.c_str(), compat.c_str(),
      // Inline everything, as NVRTC does: a call left in the kernel crosses the wgmma
      // pipeline (serialised) and breaks __launch_bounds__' register limit in nvJitLink.
      "-mllvm", "-inline-threshold=100000", "-S",
      source_path.c_str(), "-o", "/dev/null"};
  for (const std::string& o : req.options) args.push_back(o.c_str());  // -D only (checked)
  clang::driver::Driver driver(WINNOW_CLANG_EXECUTABLE, llvm::sys::getDefaultTargetTriple(),
                               diags, "winnow", vfs);
  driver.setCheckInputsExist(false);
  std::unique_ptr<clang::driver::Compilation> compilation(driver.BuildCompilation(args));
  if (!compilation || diags.hasErrorOccurred())
    throw_compile_error(req, "clang", "the driver refused the command line", log);
  const clang::driver::JobList& jobs = compilation->getJobs();
  if (jobs.size() != 1 || !llvm::isa<clang::driver::Command>(*jobs.begin()))
    throw_compile_error(req, "clang", "expected one device compile job from the driver", log);
  const auto& cmd = llvm::cast<clang::driver::Command>(*jobs.begin());

  auto invocation = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(*invocation, cmd.getArguments(), diags))
    throw_compile_error(req, "clang", "bad compiler invocation", log);

  use_embedded_resource_headers(*invocation);
  apply_llvm_args(invocation->getFrontendOpts().LLVMArgs);
  // Diagnostics go to the log only: with carets on, CompilerInstance also prints "N warnings
  // generated" to the process's stderr, which a library must not write.
  invocation->getDiagnosticOpts().ShowCarets = false;
  // The front end only: optimise() runs LLVM's -O3 pipeline after mark_grid_constant, so
  // that the NVPTX passes inside it read the annotations as codegen will.
  invocation->getCodeGenOpts().DisableLLVMPasses = true;

  clang::CompilerInstance ci;
  ci.setInvocation(invocation);
  ci.createDiagnostics(printer.get(), /*ShouldOwnClient=*/false);
  ci.createFileManager(vfs);

  DeviceModule out;
  out.context = std::make_unique<llvm::LLVMContext>();
  clang::EmitLLVMOnlyAction action(out.context.get());
  const bool ok = ci.ExecuteAction(action);
  log_stream.flush();
  if (!ok || ci.getDiagnostics().hasErrorOccurred())
    throw_compile_error(req, "clang", "errors in the CUDA source", log);
  out.module = action.takeModule();
  if (!out.module) throw_compile_error(req, "clang", "no LLVM module produced", log);
  mark_grid_constant(*out.module);
  out.log = log;
  return out;
}

std::string module_text(const llvm::Module& m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  os.flush();
  return text;
}

namespace {

std::unique_ptr<llvm::TargetMachine> target_machine(llvm::Module& m, const CompileRequest& req) {
  init_nvptx();
  const std::string triple = m.getTargetTriple();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) throw_compile_error(req, "LLVM NVPTX", "no target for " + triple, error);
  // The functions carry clang's target-cpu and target-features (the PTX version).
  std::string features;
  for (const llvm::Function& f : m)
    if (features.empty() && !f.isDeclaration() && f.hasFnAttribute("target-features"))
      features = f.getFnAttribute("target-features").getValueAsString().str();
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Strict;  // as -ffp-contract=off
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, req.arch.str(), features, options, llvm::Reloc::Static, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm) throw_compile_error(req, "LLVM NVPTX", "cannot create a target machine", "");
  m.setDataLayout(tm->createDataLayout());
  return tm;
}

}  // namespace

void optimise(llvm::Module& m, const CompileRequest& req) {
  std::unique_ptr<llvm::TargetMachine> tm = target_machine(m, req);
  llvm::PipelineTuningOptions tuning;  // clang's -O3: unrolling and both vectorizers
  tuning.LoopUnrolling = tuning.LoopVectorization = tuning.SLPVectorization = true;
  llvm::PassBuilder pb(tm.get(), tuning);  // adds NVPTX's passes (NVVMReflect, ...)
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

std::string module_to_ptx(llvm::Module& m, const CompileRequest& req) {
  std::unique_ptr<llvm::TargetMachine> tm = target_machine(m, req);
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw_compile_error(req, "LLVM NVPTX", "the target cannot emit PTX", "");
  pm.run(m);
  return std::string(ptx.str());
}

}  // namespace winnow::backend::llvm_be
