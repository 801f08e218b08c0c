// What every backend does when a compile fails: writes the request's source and headers
// where they can be replayed by hand, and throws CompileError naming that place.
#pragma once
#include <string>

#include "compiler/backend/backend.h"

namespace winnow::backend {

// Writes the source (and headers under include/) to req.dump_dir or a new temp folder.
// Returns the source's path, or "" when nothing could be written.
std::string dump_sources(const CompileRequest& req);

// "<compiler> failed to compile <source> for <arch>: <what>\n<log>\n<where the source is>".
[[noreturn]] void throw_compile_error(const CompileRequest& req, const std::string& compiler,
                                      const std::string& what, const std::string& log);

}  // namespace winnow::backend
