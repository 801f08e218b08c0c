#include "runtime/nccl_library.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>

#include "runtime/env.h"

namespace winnow::rt {
namespace {

struct NcclState {
  NcclApi api;
  std::string why_not;  // empty when loaded
};

NcclState load_nccl() {
  NcclState s;
  const std::optional<std::string> forced = env_get("WINNOW_NCCL_LIBRARY");
  const std::string path = forced && !forced->empty() ? *forced : "libnccl.so.2";
  // Never dlclose'd: communicators outlive any owner we could give it.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    s.why_not = "NCCL is not available: " + path + " could not be loaded (" +
                (err ? err : "unknown error") +
                "). Install it (pip install nvidia-nccl-cu13, then put its nvidia/nccl/lib "
                "on LD_LIBRARY_PATH) or set WINNOW_NCCL_LIBRARY to the library's path; or pass "
                "an all-gather callback instead of an ncclComm_t";
    return s;
  }
  s.api.path = path;
  auto sym = [&](const char* name, auto** slot) {
    *slot = reinterpret_cast<std::remove_reference_t<decltype(*slot)>>(dlsym(lib, name));
    if (!*slot && s.why_not.empty()) s.why_not = path + " has no " + name + ": not an NCCL 2 library";
  };
  sym("ncclAllGather", &s.api.all_gather);
  sym("ncclCommCount", &s.api.comm_count);
  sym("ncclCommUserRank", &s.api.comm_user_rank);
  sym("ncclGetErrorString", &s.api.get_error_string);
  sym("ncclCommInitAll", &s.api.comm_init_all);
  sym("ncclCommDestroy", &s.api.comm_destroy);
  return s;
}

}  // namespace

const NcclApi& nccl() {
  // A success is kept for the process; a failure is tried again at the next call (one
  // dlopen), so that a library installed or named later is found.
  static std::mutex mutex;
  static NcclState state;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    NcclState s = load_nccl();
    if (!s.why_not.empty()) throw NcclMissing(s.why_not);
    state = s;
    loaded = true;
  }
  return state.api;
}

void check_nccl(const NcclApi& api, int result, const char* what) {
  if (result == kNcclSuccess) return;
  const char* text = api.get_error_string ? api.get_error_string(result) : nullptr;
  throw NcclFailed(std::string(what) + " failed: NCCL error " + std::to_string(result) + " (" +
                   (text ? text : "no message") + ")");
}

}  // namespace winnow::rt
