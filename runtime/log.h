// Diagnostic lines on stderr, by WINNOW_LOG_LEVEL: error (only errors), warn (the default:
// cache warnings), info (one line per kernel compiled), debug (also where each kernel came
// from: memory, disk or a compile, with its key). Each line is written in one call, so the
// lines of concurrent threads and processes do not mix.
#pragma once
#include <string>

namespace winnow::rt {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

// WINNOW_LOG_LEVEL now (read at every call: cheap, and tests change it); an unknown value
// counts as warn.
LogLevel log_level();
bool log_enabled(LogLevel level);
// "winnow: <level>: <msg>" with newlines in msg folded to spaces, when the level is on.
void log(LogLevel level, std::string msg);

}  // namespace winnow::rt
