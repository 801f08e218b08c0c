// Recording a run's compiles (WINNOW_RECORD_COMPILES=DIR): every request compile_cached
// sees, hit or miss, is written once to DIR, one file per content key, so that another
// backend can build the same kernels on another machine (`winnow cache replay DIR`). How
// the [gpu] suite gets the llvm backend's cubins on a GPU machine that has no LLVM: record
// a run there, replay here with WINNOW_BACKEND=llvm, carry the cache back.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"

namespace winnow::ops {

struct RecordedCompile {
  std::string stem, program, description;
  backend::CompileRequest request;  // without headers: the same build's templates
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
