#include "ops/common/jit_module.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "compiler/build_id.h"
#include "compiler/codegen/embedded_templates.h"
#include "ops/common/compile_record.h"
#include "ops/common/errors.h"
#include "ops/common/loaded_kernels.h"
#include "runtime/env.h"
#include "runtime/log.h"
#include "runtime/sha256.h"

namespace winnow::ops {

const std::string& template_hashes() {
  static const std::string text = [] {
    std::string t;
    for (const auto& e : codegen::embedded_templates()) {
      t += fmt::format("{}={}\n", e.name, rt::sha256_hex(std::string_view(e.text, e.size)));
    }
    return t;
  }();
  return text;
}

std::vector<std::string> extra_compiler_options() {
  std::vector<std::string> opts;
  if (auto v = rt::env_get("WINNOW_NVRTC_OPTIONS")) {
    std::istringstream in(*v);
    for (std::string o; in >> o;) opts.push_back(o);
  }
  std::sort(opts.begin(), opts.end());
  return opts;
}

backend::CompileRequest make_compile_request(const codegen::GeneratedKernel& g,
                                             const backend::Arch& arch, const std::string& stem) {
  backend::CompileRequest req;
  req.source = g.source;
  req.source_name = stem + ".cu";
  req.headers = g.headers;
  req.arch = arch;
  req.options = extra_compiler_options();
  if (auto d = rt::env_get("WINNOW_DUMP_DIR")) req.dump_dir = *d;
  return req;
}

rt::CubinId module_id(const backend::Backend& be, const backend::CompileRequest& req,
                      const std::string& program) {
  rt::ContentKeyInputs in;
  in.build_id = build_id();
  in.template_hashes = template_hashes();
  in.backend = be.name() + " " + be.version();
  in.arch = req.arch.str();
  for (const auto& o : req.options) in.options += o + "\n";
  // The generated stub itself, so a change to the emitter changes the key even when the
  // build id (the commit, read at configure time) is stale.
  in.program = program + req.source;
  return rt::CubinId{in.arch, rt::content_key(in), in.backend};
}

CompiledModule compile_cached(rt::CubinCache& cache, const backend::Backend& be,
                              backend::CompileRequest req, const std::string& stem,
                              const std::string& program, const std::string& description) {
  const rt::CubinId id = module_id(be, req, program);
  CompiledModule m;
  m.key = id.key;
  record_compile(RecordedCompile{stem, program, description, req}, id.key);
  req.source_name = fmt::format("{}_{}.cu", stem, m.key.substr(0, 16));
  auto request = std::make_shared<const backend::CompileRequest>(std::move(req));
  const rt::CubinCache::Compile compile = [&be, request] { return be.compile(*request).cubin; };
  const auto t0 = std::chrono::steady_clock::now();
  auto got = cache.get(id, description, compile);
  m.cubin = std::move(got.cubin);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  using From = rt::CubinCache::Result::From;
  if (got.from == From::Compiled) {
    rt::log(rt::LogLevel::Info, fmt::format("compiled {} for {} with {} in {:.0f} ms ({} bytes)",
                                            stem, id.arch, id.backend, ms, m.cubin.size()));
  } else {
    rt::log(rt::LogLevel::Debug,
            fmt::format("{} for {} from the {} cache in {:.1f} ms", stem, id.arch,
                        got.from == From::Memory ? "memory" : "disk", ms));
  }
  rt::log(rt::LogLevel::Debug, fmt::format("{} key {}", stem, m.key));
  if (got.from != rt::CubinCache::Result::From::Compiled) {
    m.replace_refused = [&cache, id, description, compile](const std::vector<char>& refused,
                                                           const std::string& why) {
      return cache.replace_refused(id, refused, why, description, compile);
    };
  }
  return m;
}

bool load_error_may_be_the_cubin(CUresult code) {
  switch (code) {
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return false;
    default:
      return true;
  }
}

std::shared_ptr<const rt::LoadedKernel> load_entry(const rt::Context& ctx,
                                                   const CompiledModule& module, const char* entry,
                                                   int dynamic_smem_bytes) {
  return loaded_kernel(ctx, module.key + "/" + entry, [&] {
    try {
      return std::make_shared<const rt::LoadedKernel>(ctx, module.cubin, entry, dynamic_smem_bytes);
    } catch (const rt::CudaError& e) {
      if (!module.replace_refused || !load_error_may_be_the_cubin(e.code())) throw;
      const auto fresh = module.replace_refused(module.cubin, e.what());
      if (!fresh) throw;
      return std::make_shared<const rt::LoadedKernel>(ctx, *fresh, entry, dynamic_smem_bytes);
    }
  });
}

void throw_not_built(bool compiled) {
  throw NotBuilt(compiled ? "the plan was compiled without a device and cannot run"
                          : "the plan is not built: call winnowPlanBuild first");
}

}  // namespace winnow::ops
