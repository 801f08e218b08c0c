#include "runtime/log.h"

#include <algorithm>
#include <cstdio>

#include "runtime/env.h"

namespace winnow::rt {

LogLevel log_level() {
  const auto v = env_get("WINNOW_LOG_LEVEL");
  if (!v) return LogLevel::Warn;
  if (*v == "error") return LogLevel::Error;
  if (*v == "info") return LogLevel::Info;
  if (*v == "debug") return LogLevel::Debug;
  return LogLevel::Warn;
}

bool log_enabled(LogLevel level) { return int(level) <= int(log_level()); }

void log(LogLevel level, std::string msg) {
  if (!log_enabled(level)) return;
  static const char* const kNames[] = {"error", "warning", "info", "debug"};
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  const std::string line = std::string("winnow: ") + kNames[int(level)] + ": " + msg + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace winnow::rt
