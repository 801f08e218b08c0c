#include "ops/common/compile_record.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "compiler/codegen/emit_cuda.h"
#include "runtime/env.h"
#include "runtime/log.h"

namespace winnow::ops {
namespace {

namespace fs = std::filesystem;
constexpr const char* kMagic = "winnow-compile 1";

// A field: its byte count on a line of its own, then the bytes and a newline.
void put(std::ostream& out, const std::string& field) { out << field.size() << '\n' << field << '\n'; }

bool get(std::istream& in, std::string* field) {
  std::string line;
  if (!std::getline(in, line) || line.empty() || line.size() > 12 ||
      !std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  const size_t n = std::stoull(line);
  if (n > (size_t(64) << 20)) return false;
  field->assign(n, '\0');
  if (!in.read(field->data(), std::streamsize(n))) return false;
  return in.get() == '\n';
}

}  // namespace

void record_compile(const RecordedCompile& r, const std::string& key) {
  const auto dir = rt::env_get("WINNOW_RECORD_COMPILES");
  if (!dir || dir->empty()) return;
  try {
    const fs::path folder(*dir), file = folder / (key + ".compile");
    if (fs::exists(file)) return;
    fs::create_directories(folder);
    std::ostringstream out;
    out << kMagic << '\n';
    put(out, r.stem);
    put(out, r.request.arch.str());
    put(out, std::to_string(r.request.options.size()));
    for (const std::string& o : r.request.options) put(out, o);
    put(out, r.program);
    put(out, r.description);
    put(out, r.request.source);
    put(out, rt::cache_relevant_env());  // the last field: a reader of older records stops before it
    // Written whole, then renamed: a reader never sees half a record.
    const fs::path tmp = folder / fmt::format(".{}.{}.tmp", key, ::getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f << out.str();
      if (!f) throw std::runtime_error("cannot write " + tmp.string());
    }
    fs::rename(tmp, file);
  } catch (const std::exception& e) {
    rt::log(rt::LogLevel::Warn, fmt::format("WINNOW_RECORD_COMPILES: {} not recorded ({})", key, e.what()));
  }
}

std::vector<RecordedCompile> read_recorded_compiles(const fs::path& dir, std::vector<std::string>* skipped) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".compile") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<RecordedCompile> out;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::string magic, arch, count;
    RecordedCompile r;
    bool ok = std::getline(in, magic) && magic == kMagic && get(in, &r.stem) && get(in, &arch) &&
              get(in, &count) && !count.empty() && count.size() < 4 &&
              std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (ok) {
      for (int i = 0, n = std::stoi(count); ok && i < n; ++i) {
        std::string o;
        ok = get(in, &o);
        r.request.options.push_back(o);
      }
    }
    ok = ok && get(in, &r.program) && get(in, &r.description) && get(in, &r.request.source);
    if (ok) {
      try {
        r.request.arch = backend::parse_arch(arch);
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) {
      if (skipped) skipped->push_back(file.string() + ": not a winnow compile record");
      continue;
    }
    if (!get(in, &r.env)) r.env.clear();  // an older record: no environment field
    r.request.source_name = r.stem + ".cu";
    r.request.headers = codegen::template_headers();
    out.push_back(std::move(r));
  }
  return out;
}

RecordedEnvScope::RecordedEnvScope(const std::string& env) {
  // Every cache-relevant variable of the registry as the record has it (set, or unset when
  // the record does not name it); a line naming anything else is ignored.
  for (const rt::Switch& v : rt::switch_registry()) {
    if (!v.cache_relevant || v.kind != rt::SwitchKind::Environment) continue;
    const std::string prefix = std::string(v.name) + "=";
    std::optional<std::string> wanted;
    std::istringstream in(env);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(prefix, 0) == 0) wanted = line.substr(prefix.size());
    const char* now = std::getenv(v.name);
    saved_.emplace_back(v.name, now ? std::optional<std::string>(now) : std::nullopt);
    if (wanted)
      ::setenv(v.name, wanted->c_str(), 1);
    else
      ::unsetenv(v.name);
  }
}

RecordedEnvScope::~RecordedEnvScope() {
  for (const auto& [name, value] : saved_) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
}

}  // namespace winnow::ops
