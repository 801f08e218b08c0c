// Writes a failed compile's source and headers to a folder, and the CompileError naming it.
#include "compiler/backend/dump_sources.h"

#include <filesystem>
#include <fstream>
#include <random>

namespace winnow::backend {
namespace {

namespace fs = std::filesystem;

// A name from the request as a relative path that stays inside the dump folder.
fs::path contained(const std::string& name, const char* fallback) {
  fs::path p = fs::path(name).lexically_normal();
  if (name.empty() || p.is_absolute() || p.empty() || *p.begin() == "..") return fallback;
  return p;
}

bool write_text(const fs::path& p, const std::string& text) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return !out.fail();
}

}  // namespace

std::string dump_sources(const CompileRequest& req) {
  fs::path dir;
  std::error_code ec;
  if (!req.dump_dir.empty()) {
    dir = req.dump_dir;
  } else {
    std::random_device rd;
    dir = fs::temp_directory_path(ec) /
          ("winnow-failed-" + std::to_string(rd()) + std::to_string(rd()));
    if (ec) return "";
  }
  fs::path source = dir / contained(req.source_name, "source.cu");
  if (!write_text(source, req.source)) return "";
  for (const auto& [name, text] : req.headers)
    write_text(dir / "include" / contained(name, "header.cuh"), text);
  return source.string();
}

void throw_compile_error(const CompileRequest& req, const std::string& compiler,
                         const std::string& what, const std::string& log) {
  std::string path = dump_sources(req);
  std::string msg = compiler + " failed to compile " + req.source_name + " for " +
                    req.arch.str() + ": " + what + "\n" + log + "\n";
  msg += path.empty() ? "generated source could not be written"
                      : "generated source written to " + path;
  throw CompileError(msg, log, path);
}

}  // namespace winnow::backend
