// Recording a run's compiles (WINNOW_RECORD_COMPILES=DIR): every request compile_cached
// sees, hit or miss, is written once to DIR, one file per content key, so that another
// backend can build the same kernels on another machine (`winnow cache replay DIR`). How
// the [gpu] suite gets the llvm backend's cubins on a GPU machine that has no LLVM: record
// a run there, replay here with WINNOW_BACKEND=llvm, carry the cache back.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/backend/backend.h"

namespace winnow::ops {

struct RecordedCompile {
  std::string stem, program, description;
  backend::CompileRequest request;  // without headers: the same build's templates
  // The cache-relevant environment at the request (rt::cache_relevant_env(): "NAME=VALUE"
  // lines), which is part of its key: WINNOW_NVRTC_OPTIONS of a case that sets it. Empty
  // in a record written by a build that did not key on it.
  std::string env;
};

// For its life, the cache-relevant environment a record was made under (each cache-relevant
// variable of the registry set as recorded, or unset; other names in the record are
// ignored), so that the replay's key is the recorded run's; the caller's values come back
// after.
class RecordedEnvScope {
 public:
  explicit RecordedEnvScope(const std::string& env);
  ~RecordedEnvScope();
  RecordedEnvScope(const RecordedEnvScope&) = delete;
  RecordedEnvScope& operator=(const RecordedEnvScope&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Writes `r` to $WINNOW_RECORD_COMPILES/<key>.compile when the variable names a folder
// (created if missing) and the file is not there yet; a failure is a warning, never an
// error of the compile.
void record_compile(const RecordedCompile& r, const std::string& key);

// The records in `dir` (files *.compile), with the embedded templates as headers; a file
// that does not read as one is skipped with its reason in `skipped`.
std::vector<RecordedCompile> read_recorded_compiles(const std::filesystem::path& dir,
                                                    std::vector<std::string>* skipped);

}  // namespace winnow::ops
